"""Record types, errors, the run folder on disk, environment facts, units. May import: nothing of evalsuite."""
