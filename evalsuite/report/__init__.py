"""Reading runs back: summary, compare, plots, gate and its rules, the results page, MLflow tracking (its settings, runs read back from it, the reviewer's view). May import: core, stats."""
