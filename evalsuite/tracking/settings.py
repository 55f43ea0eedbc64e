"""Where results go: the `tracking:` section of a run config (kept here so report needs nothing from run)."""

from __future__ import annotations

from urllib.parse import urlparse

from pydantic import field_validator

from evalsuite.core.configfile import Strict
from evalsuite.core.errors import ConfigError

# The URI schemes MLflow's tracking client opens (its tracking-store registry, which
# tests/test_tracking.py holds this list to); `postgresql+psycopg2` and the like name a driver too.
TRACKING_SCHEMES = ("http", "https", "sqlite", "file", "postgresql", "mysql", "mssql", "databricks", "databricks-uc",
                    "uc")


URIS_ALLOWED = "allowed: a folder path, or a URI of " + ", ".join(f"{s}:" for s in TRACKING_SCHEMES)


def uri_problem(uri: str) -> str | None:
    """Why MLflow cannot open `uri` as a tracking store, in words; None where it can (a bare path is a
    local file store)."""
    scheme = urlparse(uri).scheme
    if not uri.strip():
        return f"empty ({URIS_ALLOWED})"
    if scheme == "" or len(scheme) == 1 or scheme.split("+", 1)[0] in TRACKING_SCHEMES:
        return None
    return f"{uri!r}: not a tracking URI MLflow opens ({URIS_ALLOWED})"


def check_uri(where: str, uri: str | None) -> str | None:
    """`uri` as given by `where` (a flag, $MLFLOW_TRACKING_URI), or the one line that refuses it."""
    problem = uri_problem(uri) if uri is not None else None
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return uri


class TrackingConfig(Strict):
    enabled: bool = True
    uri: str | None = None  # else $MLFLOW_TRACKING_URI, else sqlite in the output dir
    experiment: str = "evalsuite"

    @field_validator("uri")
    @classmethod
    def _opens(cls, uri: str | None) -> str | None:
        problem = uri_problem(uri) if uri is not None else None
        if problem:
            raise ValueError(problem)
        return uri
