"""Decisions: the policy that turns the statistics of evalsuite.stats into pass, fail or inconclusive.

gate (a candidate against its baseline, check by check) and its rules (the shipped gate_rules*.yaml
and a config's `gate_rules`), the checks of a task that stopped early (sequential), the capacity
check's brackets, the at-chance and at-ceiling marks (informative), and the evidence compare sets
side by side (compare: entries, baseline, intervals, paired deltas). report/ shows what is decided
here; nothing here formats for a reader. May import: core, stats, capacity.
"""
