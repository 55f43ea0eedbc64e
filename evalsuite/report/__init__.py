"""Reading runs back: summary, compare, plots, gate, MLflow tracking. May import: core, stats."""
