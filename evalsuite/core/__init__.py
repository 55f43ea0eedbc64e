"""Record types, errors, the run folder on disk, environment facts, units, engine settings. May import: nothing of evalsuite."""
