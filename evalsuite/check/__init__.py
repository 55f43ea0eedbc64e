"""`evalsuite check`: claims (YAML) + run folders or the planner -> held / not held / not measurable.

Imports core types, records, config (for one-line errors), the planner, and the gate's rules and
confidence sequences (a task stopped early is judged as the gate judges it); nothing imports it but the CLI.

May import: core, stats, memory, run, report, verdict.
"""
