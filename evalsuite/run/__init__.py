"""Running a config: the config schema, runner, scheduler, session, finishing, predicted memory. May import: core, stats, data, memory, models, engine, tasks, report."""
