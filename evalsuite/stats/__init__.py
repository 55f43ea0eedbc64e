"""Statistics: metric helpers, standard errors over fixed strata (strata), intervals, paired and unpaired tests, timing intervals. May import: core."""

CONFIDENCE = 0.95  # two-sided: the level of an interval where none is asked for
