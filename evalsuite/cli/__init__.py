"""The command line (typer). May import: core, stats, data, memory, models, engine, tasks, report, run, check, results."""
