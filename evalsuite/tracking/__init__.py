"""MLflow: the `tracking:` settings, a run folder logged as a parent run with a nested run per variant,
runs fetched back into run folders, and where compared runs come from (a folder, else MLflow).
May import: core, report, verdict.
"""
