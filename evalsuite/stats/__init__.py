"""Statistics: metric helpers, intervals, paired and unpaired tests. May import: core."""
