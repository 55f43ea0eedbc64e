"""Statistics: metric helpers, intervals, paired and unpaired tests, timing intervals. May import: core."""
