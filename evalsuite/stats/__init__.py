"""Statistics: metric helpers, intervals, paired and unpaired tests, timing intervals, at-chance and at-ceiling marks. May import: core."""
