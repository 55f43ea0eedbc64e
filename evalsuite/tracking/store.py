"""MLflow: one parent run per `evalsuite run`, one nested run per variant. The only mlflow importer.

The run directory is the record; MLflow is a copy. Logging is therefore idempotent: runs
already in the experiment are found by the tags `evalsuite.run_id` / `evalsuite.variant`
and a content digest, so `evalsuite sync` can be repeated and only uploads what is missing
or stale. `tracking.json` in the run directory remembers where a run went, per URI.

Artifacts: parent `run/` (config.yaml, env.json, run.json) and `report/` (the decision page
report.html and report.md with its plots, compare.md, compare.csv); each variant run has
result.json, samples/<task>.jsonl, engine.log, and one dataset input per task (item ids, groups,
targets: what the variant was asked). Each variant run also carries its gate verdict and the
review's display columns (tags), its accuracy changes against the baseline (`delta/<task>/<metric>_pt`)
and users at the SLO over the baseline's (`capacity/users_vs_baseline/ctx<L>`): evalsuite.report.review
and capacity_view say what they are.
`fetch` reverses this layout into a run directory so compare and gate read MLflow runs too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import pandas as pd
import requests
from mlflow.entities import Dataset as MlDataset
from mlflow.entities import DatasetInput, InputTag
from mlflow.entities import Metric as MlMetric
from mlflow.entities import Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.core.hosts import is_loopback, tracking_host
from evalsuite.core.shared import shared_text
from evalsuite.core.rundir import (CAPACITY_DIR, CONFIG_FILE, ENGINE_LOG, ENV_FILE, RESULT_FILE, RUN_FILE, SAMPLES_DIR,
                                    RunDir, is_safe_name)
from evalsuite.core.types import RunRecord, VariantResult
from evalsuite.report.capacity_view import view as capacity_view
from evalsuite.report.placement import beside, is_packed, placement_metrics
from evalsuite.report.review import (NOTE_MARK, T_NOTE, VIEW_TAG, experiment_note, review_hint, run_review, runs_table_url,
                                     variant_review, view_columns, view_state)
from evalsuite.tracking.settings import TrackingConfig, check_uri
from evalsuite.verdict.compare import flat_metrics
from evalsuite.verdict.gate import GateReport

STATE_FILE = "tracking.json"
# An unreachable server must fail in seconds, not after MLflow's default 7 retries with backoff;
# and a CLI that prints its own summary has no use for a "View run" line per run.
SESSION_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
               "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
MAX_KEY, MAX_PARAM, MAX_TAG = 250, 6000, 8000  # mlflow.utils.validation limits
BATCH = 100  # log_batch allows 100 params/tags and 1000 entities per call
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
T_RUN, T_VARIANT, T_ROLE, T_SYNCED = "evalsuite.run_id", "evalsuite.variant", "evalsuite.role", "evalsuite.synced"
T_PARENT = "mlflow.parentRunId"
# The experiment's kind, as MLflow's UI names it (its ExperimentKind enum; no Python constant
# exists): MLflow 3 releases before the sidebar's "GenAI | Model training" switch open an experiment
# of this kind on its runs table. MLflow 3.17 reads no setting of the experiment for that: its
# switch alone decides (the link's `workflowType=machine_learning`, else the browser's last choice,
# else GenAI; server/js main bundle, `mlflow.workflowType`), so the printed link names the switch.
T_EXPERIMENT_KIND, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
DATASET_CONTEXT = "evaluation"  # the dataset input's mlflow.data.context tag
# The UI expands, on a first visit, the parents of runs of this type: a variant is an evaluation,
# and the runs table then lists the variants under their run without a click.
T_RUN_TYPE, RUN_TYPE = "mlflow.runType", "evaluation"


class TrackingError(EvalsuiteError):
    """MLflow could not be reached or refused a write; the run directory is unaffected."""


# ---------------------------------------------------------------- names and values


def sanitize(name: str) -> str:
    """A key MLflow accepts. Any change appends a hash of the original, so two names never merge
    and the same name always maps to the same key, whatever else a run logged."""
    clean = re.sub(r"[^A-Za-z0-9_\-. /:]", "_", name)
    parts = ["__" if p == ".." else p for p in clean.split("/") if p not in ("", ".")]
    clean = "/".join(parts) or "_"
    if clean == name and len(name) <= MAX_KEY:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{clean[: MAX_KEY - 9]}-{digest}"


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested settings as dotted keys with string values (lists as JSON), as MLflow params."""
    if isinstance(data, dict) and data:
        out: dict[str, str] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if data is None or data == {}:
        return {}
    value = json.dumps(data) if isinstance(data, (list, tuple)) else str(data)
    return {prefix: value[:MAX_PARAM]}


def _ms(when: datetime | None) -> int | None:
    if when is None:
        return None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- where to log


@dataclass
class Target:
    uri: str
    experiment: str


def default_uri(output_dir: Path) -> str:
    """The embedded store: a SQLite file next to the run folders, no server needed."""
    return f"sqlite:///{Path(output_dir).resolve() / 'mlflow.db'}"


def read_uri(uri: str | None, output_dir: Path = Path("runs")) -> str:
    """For readers (compare, gate): --uri, else $MLFLOW_TRACKING_URI, else the default store."""
    return uri or env_uri() or default_uri(output_dir)


def env_uri() -> str | None:
    """$MLFLOW_TRACKING_URI, refused in one line where MLflow could not open it."""
    return check_uri("$MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI") or None)


def run_tracking_config(run_dir: RunDir) -> TrackingConfig:
    section = run_dir.read_config().get("tracking") or {}
    return TrackingConfig.model_validate(section)


def recorded_host_problem(run_dir: RunDir, cfg: TrackingConfig, uri: str | None) -> str | None:
    """Why `sync` may not send MLflow's credentials where a run folder's recorded tracking.uri points: a
    folder is anyone's data (an archive, a CI artifact), so a server beyond this machine is reached only
    where the user names it (--uri, $MLFLOW_TRACKING_URI); None where it may."""
    host = tracking_host(cfg.uri) if uri is None and cfg.uri else None
    if host is None or is_loopback(host) or host == tracking_host(os.environ.get("MLFLOW_TRACKING_URI") or ""):
        return None
    return (f"{run_dir.config_path}: tracking.uri names host {host}, and MLflow's credentials would go there; give "
            f"--uri (or $MLFLOW_TRACKING_URI) naming the server to sync this run folder to it")


def local_store(uri: str) -> Path | None:
    """The file or folder behind a local tracking URI (SQLite file, file store); None for servers."""
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
        return Path(path) if path and path != ":memory:" else None
    if parsed.scheme == "file":
        return Path(url2pathname(parsed.path))
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # a bare path (or a Windows drive letter)
        return Path(uri)
    return None


def resolve_target(run_dir: RunDir, cfg: TrackingConfig | None, uri: str | None = None) -> Target:
    """--uri, else the config's tracking.uri, else $MLFLOW_TRACKING_URI, else SQLite beside the run."""
    cfg = cfg or run_tracking_config(run_dir)
    chosen = uri or cfg.uri or env_uri() or default_uri(run_dir.root.parent)
    return Target(uri=chosen, experiment=cfg.experiment)


@contextmanager
def _session(uri: str) -> Iterator[MlflowClient]:
    """A client with short HTTP retries; user-set MLFLOW_HTTP_* values win."""
    saved = {k: os.environ.get(k) for k in SESSION_ENV}
    for k, v in SESSION_ENV.items():
        os.environ.setdefault(k, v)
    for noisy in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        _check_reachable(uri)
        _migrated(uri)
        yield MlflowClient(tracking_uri=uri)
    except MlflowException as e:
        raise TrackingError(f"MLflow at {uri}: {e.message.splitlines()[0] if e.message else e}") from e
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _migrated(uri: str) -> None:
    """Create or upgrade a SQLite store under a lock beside it. MLflow migrates a store on first
    open; two processes doing so at once (two runs started together) leave it half-migrated, and
    every later open fails ("table _alembic_tmp_... already exists")."""
    store = local_store(uri) if uri.startswith("sqlite:") else None
    if store is None:
        return
    from filelock import FileLock

    store.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(store) + ".lock"):
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)


def _check_reachable(uri: str) -> None:
    # One cheap probe, so a dead server costs one short timeout instead of a stack of failed calls.
    if not uri.startswith(("http://", "https://")):
        return
    try:
        requests.get(uri.rstrip("/") + "/health", timeout=5)
    except requests.RequestException as e:
        raise TrackingError(f"MLflow server {uri} is unreachable ({type(e).__name__})") from None


def _experiment_id(client: MlflowClient, target: Target, artifact_root: Path | None) -> str:
    exp = client.get_experiment_by_name(target.experiment)
    if exp is None:
        # A SQLite store has no artifact server: put artifacts in a folder next to it.
        location = artifact_root.resolve().as_uri() if artifact_root and target.uri.startswith("sqlite:") else None
        try:
            return client.create_experiment(target.experiment, artifact_location=location,
                                            tags={T_EXPERIMENT_KIND: EXPERIMENT_KIND})
        except MlflowException:
            exp = client.get_experiment_by_name(target.experiment)  # created concurrently
            if exp is None:
                raise
    if exp.lifecycle_stage != "active":
        raise TrackingError(f"MLflow experiment {target.experiment!r} at {target.uri} is deleted; "
                            f"restore it or set tracking.experiment")
    if T_EXPERIMENT_KIND not in exp.tags:  # an experiment someone else made: a kind chosen in the UI stays
        client.set_experiment_tag(exp.experiment_id, T_EXPERIMENT_KIND, EXPERIMENT_KIND)
    return exp.experiment_id


# ---------------------------------------------------------------- what to log


def _quote(value: str) -> str:
    q = "'" if "'" not in value else '"'
    if q in value:
        raise ConfigError(f"{value!r}: quotes of both kinds cannot be searched in MLflow")
    return f"{q}{value}{q}"


def run_params(record: RunRecord, config: dict) -> dict[str, str]:
    """What every run of this config shares: model identity, tasks, latency pass, seed."""
    params = {"model.name": record.model, "engine.mode": record.mode}
    if record.env.model_dir:
        params["model.dir"] = record.env.model_dir
    params.update(flatten({k: v for k, v in (config.get("model") or {}).items() if k != "name"}, "model"))
    for task in config.get("tasks") or []:
        params.update(flatten({k: v for k, v in task.items() if k != "name"}, f"task.{task.get('name')}"))
    params.update(flatten(config.get("latency"), "latency"))
    if "seed" in config:
        params["seed"] = str(config["seed"])
    return params


def run_tags(record: RunRecord, env: dict) -> dict[str, str]:
    """What every run of evalsuite tags (create_run's tags, written as _log_batch writes its own)."""
    tags = {T_RUN: record.run_id, "evalsuite.commit": env.get("evalsuite_commit"),
            "evalsuite.version": env.get("evalsuite_version"), "vllm.version": env.get("vllm_version"),
            "vllm.distribution": env.get("vllm_distribution"), "device": record.env.device,
            "evalsuite.model": record.model}
    return {k: shared_text(str(v))[:MAX_TAG] for k, v in tags.items() if v is not None}


def run_metrics(record: RunRecord) -> dict[str, float]:
    """What the run cost (core.types.RunWall): its wall and, where sampled, its GPU-idle share."""
    w = record.wall
    if w is None:
        return {}
    return {"run/wall_s": w.wall_s, **({"run/gpu_idle_frac": w.gpu_idle_frac} if w.gpu_idle_frac is not None else {})}


def run_cost_tags(record: RunRecord) -> dict[str, str]:
    """The GPU-idle share as a reader of the run page sees it, also where it was not sampled."""
    return {"evalsuite.gpu_idle": record.wall.idle_text()} if record.wall is not None else {}


def variant_metrics(result: VariantResult) -> dict[str, float]:
    out = {sanitize(k): v for k, v in {**flat_metrics(result), **placement_metrics(result)}.items() if v is not None}
    if result.duration_s is not None:
        out["variant/duration_s"] = result.duration_s
    return out


def variant_digest(rd: RunDir, result: VariantResult) -> str:
    """Changes whenever the variant's result or its sample files do (e.g. after --resume)."""
    samples = [(p.name, p.stat().st_size) for p in rd.sample_files(result.variant)]
    return _digest(result.model_dump_json(), json.dumps(samples))


def _log_batch(client: MlflowClient, run_id: str, params: dict[str, str] | None = None,
               metrics: dict[str, float] | None = None, tags: dict[str, str] | None = None) -> None:
    now = int(datetime.now(UTC).timestamp() * 1000)
    # shared with whoever opens the experiment: no path of this machine in a value (core.shared)
    p = [Param(sanitize(k), shared_text(v)[:MAX_PARAM]) for k, v in (params or {}).items()]
    m = [MlMetric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
    t = [RunTag(k, shared_text(v)[:MAX_TAG]) for k, v in (tags or {}).items()]
    for i in range(0, max(len(p), len(m), len(t)), BATCH):
        client.log_batch(run_id, metrics=m[i : i + BATCH], params=p[i : i + BATCH], tags=t[i : i + BATCH])


# ---------------------------------------------------------------- task data as MLflow datasets


def task_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per item: its id, group, target, prompt length and scalar metadata. Prompts stay
    out: a needle prompt is a whole haystack, and the samples artifact has them all."""
    out = []
    for row in rows:
        sample, completion = row.get("sample") or {}, row.get("completion") or {}
        request = sample.get("request") or {}
        ids = request.get("prompt_token_ids")
        item = {"id": sample.get("id", (row.get("score") or {}).get("sample_id")), "group": sample.get("group"),
                "target": sample.get("target", (row.get("score") or {}).get("target")),
                "prompt_tokens": completion.get("prompt_tokens") or (len(ids) if ids else None),
                "max_tokens": request.get("max_tokens")}
        item.update({f"meta.{k}": v for k, v in (sample.get("meta") or {}).items()
                     if isinstance(v, (str, int, float, bool))})
        out.append(item)
    frame = pd.DataFrame(out)
    return frame.sort_values("id", kind="stable").reset_index(drop=True) if "id" in frame else frame


def task_dataset(rd: RunDir, variant: str, task: str) -> DatasetInput | None:
    """A task's items as an MLflow dataset; the digest covers ids and targets, so variants that
    saw the same items share one dataset in the experiment."""
    from mlflow.data import from_pandas

    rows = rd.load_samples(variant, task)
    if not rows:
        return None
    frame = task_frame(rows)
    digest = _digest(*(f"{i}\0{t}" for i, t in zip(frame["id"], frame["target"], strict=True)))
    source = str(rd.samples_path(variant, task).resolve())
    with warnings.catch_warnings():
        # Hints meant for model signatures (integer columns, two local-file sources that resolve
        # alike) say nothing about a logged table of items; a CLI user would only see noise.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
        d = from_pandas(frame, source=source, name=task, digest=digest).to_dict()
    entity = MlDataset(name=d["name"], digest=d["digest"], source_type=d["source_type"], source=d["source"],
                       schema=d.get("schema"), profile=d.get("profile"))
    return DatasetInput(entity, tags=[InputTag(MLFLOW_DATASET_CONTEXT, DATASET_CONTEXT)])


# ---------------------------------------------------------------- logging a run


@dataclass
class SyncResult:
    run_dir: Path
    uri: str
    experiment_id: str
    parent_run_id: str
    variant_run_ids: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)  # variant names (or "parent") newly uploaded

    @property
    def url(self) -> str:
        """The experiment's runs table, with the verdict and change columns shown."""
        return runs_table_url(self.uri, self.experiment_id)

    @property
    def link(self) -> str:
        """What to open: the link, and for a local store the command that serves it."""
        return review_hint(self.uri, self.experiment_id)

    def to_json(self) -> dict[str, Any]:
        return {"tracking_uri": self.uri, "experiment_id": self.experiment_id, "parent_run_id": self.parent_run_id,
                "variant_run_ids": self.variant_run_ids, "synced_at": datetime.now(UTC).isoformat()}


class _Logger:
    """One upload of one run directory to one experiment."""

    def __init__(self, client: MlflowClient, exp_id: str, rd: RunDir, record: RunRecord, gate: GateReport | None = None):
        self.client, self.exp_id, self.rd, self.record = client, exp_id, rd, record
        self.gate = gate  # the run's gate, where the caller judged it already (the run summary)
        self.config = rd.read_config()
        self.env = rd.read_env() or record.env.model_dump()
        self.existing = self.client.search_runs([exp_id], f"tags.`{T_RUN}` = {_quote(record.run_id)}",
                                                max_results=1000)

    def parent(self) -> tuple[str, bool]:
        """The existing parent run (oldest, if a race made two) or a new one."""
        found = sorted((r for r in self.existing if r.data.tags.get(T_ROLE) == "parent"),
                       key=lambda r: r.info.start_time or 0)
        for extra in found[1:]:
            self.client.delete_run(extra.info.run_id)  # its variants are re-created under found[0]
        if found:
            run = found[0]
            params = {k: v for k, v in run_params(self.record, self.config).items() if sanitize(k) not in run.data.params}
            # a resumed run's cost grows: logged again where it changed
            metrics = {k: v for k, v in run_metrics(self.record).items() if run.data.metrics.get(k) != v}
            _log_batch(self.client, run.info.run_id, params=params, metrics=metrics, tags=run_cost_tags(self.record))
            return run.info.run_id, False
        tags = {**run_tags(self.record, self.env), T_ROLE: "parent", "mlflow.runName": self.record.run_id}
        run = self.client.create_run(self.exp_id, start_time=_ms(self.record.created_at), tags=tags)
        _log_batch(self.client, run.info.run_id, params=run_params(self.record, self.config),
                   metrics=run_metrics(self.record), tags=run_cost_tags(self.record))
        return run.info.run_id, True

    def variant(self, parent_id: str, result: VariantResult) -> tuple[str, bool]:
        """Reuse a complete, current upload of this variant; replace stale or half-done ones."""
        digest = variant_digest(self.rd, result)
        mine = [r for r in self.existing if r.data.tags.get(T_VARIANT) == result.variant]
        keep = next((r for r in mine if r.data.tags.get(T_SYNCED) == digest
                     and r.data.tags.get(T_PARENT) == parent_id), None)
        for r in mine:
            if r is not keep:
                self.client.delete_run(r.info.run_id)
        if keep is not None:
            return keep.info.run_id, False
        return self._upload_variant(parent_id, result, digest), True

    def _upload_variant(self, parent_id: str, result: VariantResult, digest: str) -> str:
        tags = {**run_tags(self.record, self.env), T_ROLE: "variant", T_VARIANT: result.variant, T_PARENT: parent_id,
                "mlflow.runName": result.variant, "evalsuite.status": result.status, T_RUN_TYPE: RUN_TYPE}
        if result.reason:
            tags["evalsuite.reason"] = shared_text(result.reason, self.rd.root)[:MAX_TAG]
        for key, tag in (("vllm_version", "vllm.version"), ("device", "device")):
            if getattr(result.engine, key):
                tags[tag] = str(getattr(result.engine, key))
        if is_packed(result):
            tags["evalsuite.placement"] = beside(result)[:MAX_TAG]
        if result.host_load is not None:  # a tag, not a metric: the load is the host's, not the variant's figure
            tags["evalsuite.latency_host_loaded"] = str(result.host_load.loaded).lower()
            tags["evalsuite.latency_host_load_1m"] = f"{result.host_load.peak:g}"
        if (timed := result.timed_as()) is not None:  # how the latency metrics were timed, beside them in the runs view
            tags["evalsuite.latency_timed"] = timed.describe()[:MAX_TAG]
            tags["evalsuite.latency_neighbours"] = timed.neighbours
            tags["evalsuite.latency_idle_verified"] = {True: "true", False: "false"}.get(timed.idle_ok, "unchecked")
        for task, stop in result.stopped.items():  # run --stop decided: its metrics are over these items
            tags[f"evalsuite.stopped.{task}"] = f"{stop.items}/{stop.of}"
        run = self.client.create_run(self.exp_id, start_time=_ms(result.started_at) or _ms(self.record.created_at),
                                     tags=tags)
        run_id = run.info.run_id
        build = {"build": result.build.model_dump(exclude_none=True)} if result.build is not None else {}
        params = {**run_params(self.record, self.config), **flatten(result.settings.model_dump()), **flatten(build)}
        _log_batch(self.client, run_id, params=params, metrics=variant_metrics(result))
        self._variant_datasets(run_id, result)
        self._variant_artifacts(run_id, result)
        _log_batch(self.client, run_id, tags={T_SYNCED: digest})  # last: marks the upload complete
        end = _ms(result.started_at) + int(result.duration_s * 1000) if result.started_at and result.duration_s else None
        self.client.set_terminated(run_id, "FAILED" if result.status == "failed" else "FINISHED", end_time=end)
        return run_id

    def _variant_datasets(self, run_id: str, result: VariantResult) -> None:
        """Each task's items as a dataset input of the variant run, so the UI shows what was asked."""
        tasks = sorted(p.stem for p in self.rd.sample_files(result.variant))
        inputs = [d for d in (task_dataset(self.rd, result.variant, t) for t in tasks) if d is not None]
        if inputs:
            self.client.log_inputs(run_id, datasets=inputs)

    def _variant_artifacts(self, run_id: str, result: VariantResult) -> None:
        vdir, samples = self.rd.root / result.variant, self.rd.samples_dir(result.variant)
        with tempfile.TemporaryDirectory() as tmp:
            # result.json from the record, so a variant that never wrote its own file still has one
            path = Path(tmp) / RESULT_FILE
            path.write_text(result.model_dump_json(indent=2))
            self.client.log_artifact(run_id, str(path))
        if samples.is_dir() and any(samples.iterdir()):
            self.client.log_artifacts(run_id, str(samples), SAMPLES_DIR)
        if (vdir / ENGINE_LOG).exists():
            self.client.log_artifact(run_id, str(vdir / ENGINE_LOG))
        if (vdir / CAPACITY_DIR).is_dir():  # the load generator's own output of each capacity level
            self.client.log_artifacts(run_id, str(vdir / CAPACITY_DIR), CAPACITY_DIR)

    def parent_artifacts(self, parent_id: str, variant_run_ids: dict[str, str]) -> None:
        """run/ (the records), report/ (the decision page, compare's tables and plots), and on each
        variant run its verdict and changes against the baseline; then the runs table's saved view."""
        for name in (CONFIG_FILE, ENV_FILE, RUN_FILE):
            if (self.rd.root / name).exists():
                self.client.log_artifact(parent_id, str(self.rd.root / name), "run")
        with tempfile.TemporaryDirectory() as tmp:
            files, report = _report(self.rd, Path(tmp), self.gate)
            for path in files:
                self.client.log_artifact(parent_id, str(path), "report")
        if report is None:
            return
        # users at the SLO over the baseline's, per length, where the two are comparable (capacity_view)
        users = cap.ratios(report.baseline) if (cap := capacity_view(report.entries())) else {}
        for variant, (metrics, tags) in variant_review(report).items():
            if variant in variant_run_ids:
                _log_batch(self.client, variant_run_ids[variant], metrics={**metrics, **users.get(variant, {})},
                           tags=tags)
        _log_batch(self.client, parent_id, tags=run_review(report))
        experiment = self.client.get_experiment(self.exp_id)
        self.client.set_experiment_tag(self.exp_id, VIEW_TAG, view_state(view_columns(report), parent_id,
                                                                         experiment.tags.get(VIEW_TAG)))
        note = experiment.tags.get(T_NOTE)
        if note is None or note.startswith(NOTE_MARK):  # a description someone wrote stays theirs
            self.client.set_experiment_tag(self.exp_id, T_NOTE, experiment_note(report, self.record.run_id,
                                                                                self.exp_id))


def _report(rd: RunDir, out: Path, gate: GateReport | None = None):
    """The files of report/ and the page's figures (None where the page cannot be drawn). The page's
    own comparison writes compare.md, and `gate` is the run's gate where the caller has it: judging
    the run a second time would redo every paired test."""
    from evalsuite.report.compare import compare
    from evalsuite.report.compare_view import write_report
    from evalsuite.report.page import build, rules_file
    from evalsuite.report.page_doc import write
    from evalsuite.verdict.rules import load_rules

    files, report = [], None
    try:
        path = rules_file(None, rd)  # a run folder as it is: no MLflow look-up (sources) from inside tracking
        report = build([(rd, None)], None, load_rules(path), str(path), gate)
    except Exception as e:  # noqa: BLE001 - a page that cannot be drawn must not keep the records out
        logging.getLogger(__name__).warning("evalsuite: no report page for %s: %s", rd.root, e)
    try:
        files += write_report(report.parts[0].comparison if report else compare([(rd, None)]), out)
        if report is not None:
            files += write(report, out, f"evalsuite report {rd.root} --out REPORT_DIR")
    except Exception as e:  # noqa: BLE001 - likewise
        logging.getLogger(__name__).warning("evalsuite: no report for %s: %s", rd.root, e)
    return files, report


def log_run(run_dir: RunDir | Path, tracking_cfg: TrackingConfig | None = None, *, uri: str | None = None,
            gate: GateReport | None = None) -> SyncResult:
    """Upload a run directory (idempotently) and note where it went in tracking.json. `gate`: the
    run's gate (report.summary.run_gate_report), where the caller has judged the run already.

    Raises TrackingError when MLflow is unreachable or refuses; the run directory stays as it was
    apart from tracking.json, so `evalsuite sync` can finish the job later.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    # It writes run.json (the MLflow run id): a sync beside a run still writing the folder would
    # interleave with it, so it is refused as a second `run --resume` is, naming the holder.
    with rd.held():
        return _log_run(rd, tracking_cfg, uri, gate)


def _log_run(rd: RunDir, tracking_cfg: TrackingConfig | None, uri: str | None, gate: GateReport | None = None) -> SyncResult:
    record = rd.load_run()
    target = resolve_target(rd, tracking_cfg, uri)
    with _session(target.uri) as client:
        exp_id = _experiment_id(client, target, rd.root.parent / "mlartifacts")
        log = _Logger(client, exp_id, rd, record, gate)
        parent_id, new_parent = log.parent()
        if record.mlflow_run_id != parent_id:
            # before the upload, so the copy of run.json in MLflow names its own run
            record = record.model_copy(update={"mlflow_run_id": parent_id})
            rd.write_run(record)
            log.record = record
        result = SyncResult(rd.root, target.uri, exp_id, parent_id, created=["parent"] if new_parent else [])
        for v in record.variants:
            if v.status == "pending":  # never started: nothing to show until a --resume runs it
                continue
            result.variant_run_ids[v.variant], created = log.variant(parent_id, v)
            if created:
                result.created.append(v.variant)
        parent_digest = _digest(record.model_copy(update={"mlflow_run_id": None}).model_dump_json(),
                                json.dumps(sorted(result.variant_run_ids.items())))
        parent_run = client.get_run(parent_id)
        if new_parent or result.created or parent_run.data.tags.get(T_SYNCED) != parent_digest:
            log.parent_artifacts(parent_id, result.variant_run_ids)
            _log_batch(client, parent_id, tags={T_SYNCED: parent_digest})
        if parent_run.info.status != "FINISHED" or result.created:
            started = [v for v in record.variants if v.status != "pending"]
            all_failed = started and all(v.status == "failed" for v in started)
            client.set_terminated(parent_id, "FAILED" if all_failed else "FINISHED")
    _write_state(rd, result)
    return result


def _write_state(rd: RunDir, result: SyncResult) -> None:
    state = read_state(rd)
    state.setdefault("targets", {})[result.uri] = result.to_json()
    state["last"] = result.uri
    rd.write_text(STATE_FILE, json.dumps(state, indent=2))


def read_state(rd: RunDir) -> dict[str, Any]:
    """Where the run folder was uploaded before; {} where unknown (no file, or one that is damaged)."""
    try:
        return rd.read_json(STATE_FILE)
    except ConfigError:
        return {}


def find_run_dirs(paths: list[Path], output_dir: Path) -> list[RunDir]:
    """The given run directories, or every run directory under output_dir."""
    if paths:
        dirs = [RunDir(p) for p in paths]
        for d in dirs:
            if not d.exists():
                raise ConfigError(f"{d.root}: not a run directory (no {RUN_FILE})")
        return dirs
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(f"--output-dir {output_dir}: a file, not a folder; give the folder that holds run folders")
    if not output_dir.is_dir():
        raise ConfigError(f"--output-dir {output_dir}: no such folder; give the folder that holds run folders")
    return [RunDir(p) for p in sorted(output_dir.iterdir()) if RunDir(p).exists()]


# ---------------------------------------------------------------- reading back


def fetch(ref: str, uri: str | None, dest: Path) -> list[tuple[RunDir, set[str] | None]]:
    """An MLflow run id (parent or variant) or experiment name, downloaded as run directories."""
    uri = read_uri(uri)
    store = local_store(uri)
    if store is not None and not store.exists():
        # Opening a local store creates it: a lookup that is bound to fail must not leave one behind
        raise ConfigError(f"{ref}: no such run directory, and no MLflow store at {store} to look it up in "
                          f"(name one with --uri or $MLFLOW_TRACKING_URI)")
    with _session(uri) as client:
        if RUN_ID.match(ref):
            try:
                run = client.get_run(ref)
            except MlflowException:
                run = None
            if run is not None:
                return [_fetch_run(client, run, dest)]
        exp = client.get_experiment_by_name(ref)
        if exp is None:
            raise ConfigError(f"{ref}: not a run directory, nor an MLflow run id or experiment name at {uri}")
        parents = client.search_runs([exp.experiment_id], f"tags.`{T_ROLE}` = 'parent'", max_results=1000,
                                     order_by=["attributes.start_time ASC"])
        return [_fetch_parent(client, p, dest, None) for p in parents]


def _fetch_run(client: MlflowClient, run, dest: Path) -> tuple[RunDir, set[str] | None]:
    tags = run.data.tags
    if tags.get(T_ROLE) == "variant":
        return _fetch_parent(client, client.get_run(tags[T_PARENT]), dest, {tags[T_VARIANT]})
    if tags.get(T_ROLE) == "parent":
        return _fetch_parent(client, run, dest, None)
    raise ConfigError(f"MLflow run {run.info.run_id} was not logged by evalsuite (no {T_ROLE} tag)")


def _fetch_parent(client: MlflowClient, parent, dest: Path, only: set[str] | None) -> tuple[RunDir, set[str] | None]:
    """Parent's run/ becomes the run directory; each variant run's artifacts its variant folder."""
    root = dest / sanitize(parent.data.tags.get(T_RUN, parent.info.run_id)).replace("/", "_")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        client.download_artifacts(parent.info.run_id, "run", tmp)
        for f in (Path(tmp) / "run").iterdir():
            os.replace(f, root / f.name)
    children = client.search_runs([parent.info.experiment_id], f"tags.`{T_PARENT}` = '{parent.info.run_id}'",
                                  max_results=1000)
    for child in children:
        variant = child.data.tags.get(T_VARIANT)
        if is_safe_name(variant) and (only is None or variant in only):  # a tag names a folder here
            _fetch_variant(client, child.info.run_id, root / variant)
    return RunDir(root), only


def _fetch_variant(client: MlflowClient, run_id: str, vdir: Path) -> None:
    vdir.mkdir(parents=True, exist_ok=True)
    names = {a.path for a in client.list_artifacts(run_id)}
    for name in (RESULT_FILE, SAMPLES_DIR):  # engine.log stays remote: large and not needed to compare
        if name in names:
            client.download_artifacts(run_id, name, str(vdir))
