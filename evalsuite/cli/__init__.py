"""The command line (typer). May import: core, stats, data, memory, models, engine, tasks, capacity, verdict, report, tracking, run, check, results."""
