"""Statistics: metric helpers, standard errors over fixed strata (strata), intervals, paired and unpaired tests, timing intervals, at-chance and at-ceiling marks. May import: core."""
