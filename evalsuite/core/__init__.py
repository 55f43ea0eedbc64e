"""Record types, errors, config files (YAML, strict models), the run folder on disk, the output files a flag names, environment facts, units, engine settings. May import: nothing of evalsuite."""
