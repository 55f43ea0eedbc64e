"""The command line (typer). May import: core, stats, data, memory, models, engine, tasks, capacity, report, run, check, results."""
