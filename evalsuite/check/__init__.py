"""`evalsuite check`: claims (YAML) + run folders or the planner -> held / not held / not measurable.

Imports core types, records, config (for one-line errors) and the planner; nothing imports it but the CLI.

May import: core, stats, memory, run.
"""
