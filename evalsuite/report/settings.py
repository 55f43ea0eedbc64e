"""Where results go: the `tracking:` section of a run config (kept here so report needs nothing from run)."""

from __future__ import annotations

from evalsuite.core.configfile import Strict


class TrackingConfig(Strict):
    enabled: bool = True
    uri: str | None = None  # else $MLFLOW_TRACKING_URI, else sqlite in the output dir
    experiment: str = "evalsuite"
