"""Decisions: the policy that turns the statistics of evalsuite.stats into pass, fail or inconclusive.

The gate in three rooms: checks (a check per metric, by its rule's kind, and the evaluate ladder),
sides (which variants are the baseline, the candidates and the controls) and gate (GateReport, what
run_gate makes of the checks). Beside them: rules (the shipped gate_rules*.yaml and a config's
`gate_rules`), kinds (the registry of rule kinds: direction, unit, check), the checks of a task that
stopped early (sequential), the capacity check's brackets, the at-chance and at-ceiling marks
(informative), and the evidence compare sets side by side (compare: entries, baseline, intervals,
paired deltas). report/ shows what is decided here; nothing here formats for a reader, or names a
command-line flag. May import: core, stats, capacity.
"""

# the shipped rule kinds register where their checks live: known before any rules file is read
from evalsuite.verdict import checks as _shipped_kinds  # noqa: F401
