"""Record types, errors, config files (YAML, strict models), the run folder on disk, environment facts, units, engine settings. May import: nothing of evalsuite."""
