"""Records of earlier schema versions, read up to this one (types.SCHEMA_VERSION), one step a version:
the one place that knows what an older record lacks, or holds elsewhere. run.json carries its version;
a result.json from version 2 on, so one without it is version 1. Damaged records pass through as they
are, for validation to refuse them in one line.

1 to 2: a variant's checkpoint (`settings.quantized`), `settings.simulated` and a simulated variant's
`settings.dense_engine` move to `build` (settings say only what the config said); an empty `predicted`
or `placement` becomes none; a metric recorded before metrics carried their meaning gets it from its
name, and its stored `ci95` goes (reports draw intervals from stderr).

2 to 3: run.json's `env.scheduler` (what `--parallel` or `--ray` decided) moves to `scheduling`: `env`
says what the run ran on; a result.json gains `task_versions` (empty in an older one: unknown).
"""

from __future__ import annotations

from typing import Any

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import SCHEMA_VERSION, meaning_of_name

# every field a version-1 metric held once written (a dump writes them all), but the prompt position
_BEFORE_LENGTH = {"name", "value", "stderr", "n", "kind", "unit", "direction", "strata", "percentile"}
_BUILD_KEYS = ("simulated", "dense_engine")  # settings keys of version 1 that `build` holds beside the checkpoint


def upgraded(raw: dict[str, Any], where: str, run: bool) -> dict[str, Any]:
    """A run record (run.json, `run`) or one variant's result (result.json) as this version holds it; a
    version this evalsuite cannot read is refused, naming `where`."""
    version = raw.get("schema_version", None if run else 1)
    if version not in _STEPS and version != SCHEMA_VERSION:
        raise ConfigError(f"{where}: schema_version {version!r} is not supported (this evalsuite reads "
                          f"1 to {SCHEMA_VERSION})")
    while version in _STEPS:
        raw = _STEPS[version](raw)
        version = raw["schema_version"]
    return raw


def migrate_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run record (with its `variants`) or variant result, as version 2 holds it."""
    if "variants" not in raw:
        return _variant(raw)
    variants = raw["variants"]
    if isinstance(variants, list):
        variants = [_variant(v) for v in variants]
    return {**raw, "schema_version": 2, "variants": variants}


def _variant(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    out = {**v, "schema_version": 2}
    settings = out.get("settings")
    if isinstance(settings, dict) and ("quantized" in settings or any(k in settings for k in _BUILD_KEYS)):
        settings = dict(settings)
        built = settings.pop("quantized", None)
        build = {**(built if isinstance(built, dict) else {}),
                 **{k: settings.pop(k) for k in _BUILD_KEYS if k in settings}}
        build.setdefault("method", settings.get("quantize"))
        out["settings"], out["build"] = settings, build
    for key in ("predicted", "placement"):
        if out.get(key) == {}:
            out[key] = None
    if isinstance(out.get("metrics"), list):
        out["metrics"] = [_metric(m) for m in out["metrics"]]
    return out


def _metric(m: Any) -> Any:
    if not isinstance(m, dict) or not isinstance(m.get("name"), str):
        return m
    m = {k: v for k, v in m.items() if k != "ci95"}
    if "kind" not in m or ("length" not in m and _BEFORE_LENGTH <= m.keys()):
        return {**meaning_of_name(m["name"]), **m}
    return m


def migrate_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """A version-2 run record or variant result, as version 3 holds it."""
    out = {**raw, "schema_version": 3}
    if "variants" not in raw:
        return out
    if isinstance(out["variants"], list):
        out["variants"] = [{**v, "schema_version": 3} if isinstance(v, dict) else v for v in out["variants"]]
    env = out.get("env")
    if isinstance(env, dict) and "scheduler" in env:
        env = dict(env)
        out["scheduling"], out["env"] = env.pop("scheduler"), env
    return out


# version -> the step that reads it as the next one
_STEPS = {1: migrate_v1, 2: migrate_v2}
