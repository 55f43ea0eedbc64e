"""The capacity pass as a task of the run: a harness that drives the variant's server itself.

Per prompt length it searches the users at the SLO (evalsuite.capacity.search: a prefill curve
measured first, then level after level from the predicted one), or sweeps the levels listed. Each
level becomes one row of samples/capacity.jsonl (its Level record in the score's extra, the score
1 where it met the SLO), written as soon as the level ends, so a cut pass keeps its levels and a
resumed one goes on from them. The load generator's own saved result (every request's timings,
gzip) and its printed output lie beside, in the variant's capacity/ folder.
"""

from __future__ import annotations

import gzip
import os
import random
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from evalsuite.capacity.config import CapacityConfig
from evalsuite.capacity.loadgen import TOOL, Resident, bench_command, tool_version
from evalsuite.capacity.predict import kv_bound_users
from evalsuite.capacity.scrape import Sampler
from evalsuite.capacity.search import predict, requests_for, search_bracket, start_level, step
from evalsuite.capacity.search import done as search_done
from evalsuite.capacity.sweep import UNITS, Bracket, Level, Prediction, bracket, from_summary, judge
from evalsuite.core import env as envmod
from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import CAPACITY_DIR, RunDir
from evalsuite.core.types import Completion, HostLoad, Metric, MetricKind, Request, Sample, Score
from evalsuite.engine import EngineFailed
from evalsuite.engine.server import parse_prometheus
from evalsuite.stats.metrics import min_samples
from evalsuite.tasks.base import Task, TaskContext

PREFILL_AT_ONCE = (1, 4)  # the prefill curve's points: requests of a length sent at once


def level_tag(cfg: CapacityConfig, level: float) -> str:
    return f"c{int(level)}" if cfg.mode == "concurrency" else f"r{level:g}"


def level_id(cfg: CapacityConfig, length: int, level: float) -> str:
    """A level's sample id and file stem, e.g. ctx512_c8 (8 users) or ctx512_r0.5 (0.5 requests/s)."""
    return f"ctx{length}_{level_tag(cfg, level)}"


def at_slo_name(cfg: CapacityConfig, length: int) -> str:
    """capacity/users_at_slo/ctx<L> for a sweep of users, capacity/rate_at_slo/ctx<L> for one of rates."""
    return f"capacity/{'users' if cfg.mode == 'concurrency' else 'rate'}_at_slo/ctx{length}"


class CapacityTask(Task):
    name = "capacity"
    harness = True  # it sends its own requests, through the load generator
    timed_alone = True  # packed engines would share the device it measures
    limited = False  # its levels are the measurement's design, not items to thin
    runs_simulated = False  # 16-bit kernels standing in for INT4 ones would serve the baseline's load

    def __init__(self, cfg: CapacityConfig, ctx: TaskContext):
        self.cfg, self.ctx = cfg, ctx
        self.primary_metric = at_slo_name(cfg, cfg.prompt_tokens[0])

    def samples(self) -> list[Sample]:
        """One placeholder a level swept, or a length searched, naming it; the load generator makes the requests."""
        if self.cfg.searching:
            return [Sample(id=f"ctx{n}", task=self.name, request=self._request(), target="", group=str(n),
                           meta={"length": n, "mode": self.cfg.mode}) for n in self.cfg.prompt_tokens]
        return [self._sample(n, x) for n in self.cfg.prompt_tokens for x in self.cfg.levels]

    def _request(self) -> Request:
        return Request(max_tokens=self.cfg.output_tokens, ignore_eos=True)

    def _sample(self, length: int, level: float) -> Sample:
        return Sample(id=level_id(self.cfg, length, level), task=self.name, request=self._request(), target="",
                      group=str(length), meta={"length": length, "level": level, "mode": self.cfg.mode})

    def evaluate(self, engine: Any, tokenizer: Any, record: Callable[[list[dict[str, Any]]], None]) -> list[Score]:
        target = _Target.of(engine)
        rows = {r["sample"]["id"]: r for r in target.recorded(self.name)}  # this variant's, before a cut
        try:
            if self.cfg.searching:
                for n in self.cfg.prompt_tokens:
                    self._search(target, n, rows, record, tokenizer)
            else:
                for s in self.samples():
                    if s.id in rows or self._stopped(s, rows):
                        continue
                    self._keep(rows, record, s, self._measure(target, s))
                    target.check_alive(s.id)
        finally:
            target.close()
        return [Score.model_validate(r["score"]) for r in self._in_order(rows)]

    def _in_order(self, rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows by prompt length as configured, then in the order measured (a sweep's: its levels')."""
        lengths = self.cfg.prompt_tokens

        def key(r: dict[str, Any]) -> tuple:
            lv = r["score"]["extra"]
            return (lengths.index(lv["length"]) if lv["length"] in lengths else len(lengths), lv.get("order") or 0,
                    lv["level"])
        return sorted(rows.values(), key=key)

    def _keep(self, rows: dict[str, dict[str, Any]], record: Callable, sample: Sample, level: Level) -> None:
        rows[sample.id] = {"sample": sample.model_dump(), "completion": _completion(level).model_dump(),
                           "score": self.score_of(sample, level).model_dump(mode="json")}
        record(self._in_order(rows))

    def _search(self, target: "_Target", length: int, rows: dict[str, dict[str, Any]], record: Callable,
                tokenizer: Any) -> None:
        """One length's search, from the levels recorded (a resumed pass goes on where they end)."""
        grid, budget = self.cfg.levels, self.cfg.search.budget_s

        def mine() -> list[Level]:
            return sorted((Level.model_validate(r["score"]["extra"]) for r in rows.values()
                           if r["score"]["extra"]["length"] == length), key=lambda lv: lv.order or 0)

        levels = mine()
        predicted = levels[0].predicted if levels and levels[0].predicted else None
        if predicted is None and step(grid, levels, grid[0], budget).level is not None:
            predicted = self._predict(target, length, tokenizer)
        start = levels[0].level if levels else start_level(grid, predicted.users if predicted else 0)
        while (nxt := step(grid, levels, start, budget)).level is not None:
            sample = self._sample(length, nxt.level)
            if sample.id in rows:  # never twice: the record would stop moving
                break
            why = f"first: {predicted.basis}" if not levels and predicted else nxt.why
            level = self._measure(target, sample, requests_for(self.cfg, nxt.level, levels),
                                  order=len(levels) + 1, chosen=why, predicted=predicted)
            self._keep(rows, record, sample, level)
            target.check_alive(sample.id)
            levels = mine()

    def _predict(self, target: "_Target", length: int, tokenizer: Any) -> Prediction:
        """The users the engine's pool holds whole, its cap on requests at once, and those its measured
        prefill curve serves in time."""
        cfg = self.cfg
        kv = kv_bound_users(target.pool_tokens, length, cfg.output_tokens, target.block_size)
        # measured with a set start too: the record then shows what it would have predicted
        points = target.prefill_curve(length, getattr(tokenizer, "vocab_size", None), PREFILL_AT_ONCE,
                                      self.ctx.seed * 1_000 + length, cfg.timeout_s) \
            if any(k.startswith("ttft_") for k in cfg.slo) else []
        return predict(cfg, kv, points, target.max_num_seqs)

    def _stopped(self, sample: Sample, rows: dict[str, dict[str, Any]]) -> bool:
        """Whether `stop_after` levels already ran above the first of this length that missed the SLO."""
        if self.cfg.stop_after is None:
            return False
        below = [rows[s.id]["score"]["extra"] for s in self.samples()
                 if s.id in rows and s.group == sample.group and s.meta["level"] < sample.meta["level"]]
        missed = [i for i, lv in enumerate(below) if lv.get("met") is False]
        return bool(missed) and len(below) - missed[0] - 1 >= self.cfg.stop_after

    def resume(self, rows: list[dict[str, Any]]) -> bool:
        """Whether the levels recorded are the whole pass (evaluate() runs the rest otherwise)."""
        if self.cfg.searching:
            levels = [Level.model_validate(r["score"]["extra"]) for r in rows if "score" in r]
            return all(search_done(self.cfg, levels, n) for n in self.cfg.prompt_tokens)
        done = {r["sample"]["id"]: r for r in rows}
        return all(s.id in done or self._stopped(s, done) for s in self.samples())

    def score_of(self, sample: Sample, level: Level) -> Score:
        return Score(sample_id=sample.id, task=self.name, value=1.0 if level.met else 0.0, pred="", target="",
                     group=sample.group, extra=level.model_dump(mode="json"))

    def _seed(self, length: int, level: float) -> int:
        """A seed a level: the same prompts again would be served from the prefix cache the last level filled."""
        if not self.cfg.searching:
            return self.ctx.seed * 1_000 + [s.id for s in self.samples()].index(level_id(self.cfg, length, level))
        return self.ctx.seed * 100_000 + self.cfg.prompt_tokens.index(length) * 1_000 + self.cfg.levels.index(level)

    def _measure(self, target: "_Target", sample: Sample, requests: int | None = None, **search: Any) -> Level:
        n, x = sample.meta["length"], sample.meta["level"]
        asked = requests or self.cfg.requests
        result, log = target.folder / f"{sample.id}.json", target.folder / f"{sample.id}.log"
        cmd = bench_command(self.cfg, target.base_url, target.model, target.tokenizer, n, x, result, self._seed(n, x),
                            requests=asked)
        needed = max(min_samples(q) for q in self.cfg.percentiles_for(asked))
        base = Level(length=n, output_tokens=self.cfg.output_tokens, mode=self.cfg.mode, level=x, requests=asked,
                     slo=self.cfg.slo, kv_cache_tokens=target.pool_tokens, block_size=target.block_size,
                     host_load=target.load_now(), needed=needed, **search)
        with Sampler(target.metrics, self.cfg.metrics_interval_s) as sampler:
            run = target.loadgen.run(cmd, log, self.cfg.timeout_s)
        level = from_summary(base, run.summary, self.cfg.percentiles_for(asked)) if run.summary is not None else base
        level.server = sampler.view
        level.host_load = target.load_ended(base.host_load)
        level.loadgen = {"tool": TOOL, "version": tool_version(), "command": _shown(cmd), "wall_s": run.wall_s,
                         "result": _gzipped(result), "log": log.name}
        level.status, level.reason = _broken(run, level, self.cfg.timeout_s, self.cfg.max_preemptions_per_request)
        return judge(level)

    def metrics(self, scores: list[Score]) -> list[Metric]:
        levels = [Level.model_validate(s.extra) for s in scores]
        out: list[Metric] = []
        for n in self.cfg.prompt_tokens:
            b = search_bracket(self.cfg, levels, n) if self.cfg.searching else bracket(levels, self.cfg.levels, n,
                                                                                         self.cfg.mode)
            mine = [lv for lv in levels if lv.length == n]
            out += summary_metrics(self.cfg, b, mine[0] if mine else None)
            out += [m for lv in mine for m in level_metrics(self.cfg, lv)]
        return out


def _broken(run, level: Level, timeout_s: float, preemptions_per_request: float = 1.0) -> tuple[str, str | None]:
    """ok, or broken with the reason: the load generator timed out, failed, saved nothing, its
    requests failed or fell short of what its percentiles need, or the server preempted them over
    and over (more than `preemptions_per_request` times a completed request)."""
    last = run.output_tail.strip().splitlines()[-1:] or ["no output"]
    if run.returncode is None:
        return "broken", f"timed out after {timeout_s:g} s (the load generator was ended)"
    if run.returncode != 0:
        return "broken", f"{TOOL} exited with code {run.returncode}: {last[0][:300]}"
    if run.summary is None:
        return "broken", f"{TOOL} saved no result: {last[0][:300]}"
    if level.failed:
        first = f": {run.errors[0][:300]}" if run.errors else ""
        return "broken", f"{level.failed} of {level.requests} requests failed{first}"
    needed = level.needed or level.requests
    if level.completed < needed:
        return "broken", f"{level.completed} requests completed, fewer than the {needed} its percentiles need"
    preempted = level.server.preemptions or 0
    if preempted > preemptions_per_request * level.completed:
        return "broken", (f"preemption storm: {preempted:,} preemptions over {level.completed:,} requests (more than "
                          f"{preemptions_per_request:g} a request): prompts recomputed, not served")
    return "ok", None


def _shown(cmd: list[str]) -> list[str]:
    """The command as recorded: the interpreter by name (the key is never on it)."""
    return ["python", *cmd[1:]]


def _gzipped(path: Path) -> str | None:
    """The load generator's saved result, compressed in place (every request's token times); its name."""
    if not path.is_file():
        return None
    gz = path.with_name(path.name + ".gz")
    with path.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return gz.name


def _completion(level: Level) -> Completion:
    """The level as a completion: its requests' tokens in and out (the row's level record has the rest)."""
    return Completion(text="", prompt_tokens=level.tokens_in, output_tokens=level.tokens_out,
                      finish_reason=level.status)


class _Target:
    """The variant's server as the load generator and the /metrics reader reach it."""

    def __init__(self, engine: Any):
        self.base_url, self.api_key, self.model = engine.endpoint()
        self.tokenizer = engine.kwargs.get("tokenizer") or engine.model
        self.variant_dir = Path(engine.log_path).parent  # the engine logs into its variant's folder of the run
        self.folder = self.variant_dir / CAPACITY_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self._http = requests.Session()
        if self.api_key:
            self._http.headers["Authorization"] = f"Bearer {self.api_key}"
        stats = engine.stats()
        self.pool_tokens, self.block_size = stats.kv_cache_tokens, stats.block_size
        self.max_num_seqs = engine.kwargs.get("max_num_seqs")
        self.loadgen = Resident(self.api_key, self.folder / "loadgen.log")
        device = envmod.device_name() if engine.pid is not None else ""  # an attached server's device is not known here
        self.threads = envmod.engine_threads(device, getattr(engine, "env", {}).get("VLLM_CPU_OMP_THREADS_BIND"),
                                             os.cpu_count() or 1)

    @classmethod
    def of(cls, engine: Any) -> "_Target":
        if not hasattr(engine, "endpoint"):
            raise ConfigError("capacity: the load generator drives a server: needs engine.mode server "
                              f"(the engine is {type(engine).__name__})")
        return cls(engine)

    def recorded(self, task: str) -> list[dict[str, Any]]:
        """The rows the variant recorded of `task` before (its levels of a cut pass)."""
        return RunDir(self.variant_dir.parent).load_samples(self.variant_dir.name, task)

    def metrics(self) -> dict[str, Any]:
        try:
            return parse_prometheus(self._http.get(f"{self.base_url}/metrics", timeout=10).text)
        except requests.RequestException:
            return {}

    def load_now(self) -> HostLoad | None:
        return envmod.host_load_now(self.threads)

    def load_ended(self, load: HostLoad | None) -> HostLoad | None:
        return envmod.host_load_ended(load)

    def close(self) -> None:
        self.loadgen.close()

    def prefill_curve(self, length: int, vocab: int | None, at_once: tuple[int, ...], seed: int,
                      timeout_s: float) -> list[tuple[int, float]]:
        """(requests sent at once, seconds to the last one's first token) for random prompts of `length`
        tokens (each its own: none served from the prefix cache), after one untimed request of the
        length; [] where the server refused one (the search then starts from the KV pool alone)."""
        rng = random.Random(seed)
        top = max(20, (vocab or 256) - 1)  # any real vocabulary holds the first 256 ids
        headers = dict(self._http.headers)

        def ask(ids: list[int]) -> None:
            body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0}
            requests.post(f"{self.base_url}/v1/completions", json=body, headers=headers,
                          timeout=timeout_s).raise_for_status()

        def prompts(c: int) -> list[list[int]]:
            return [[rng.randrange(10, top) for _ in range(length)] for _ in range(c)]

        out = []
        try:
            ask(prompts(1)[0])
            for c in at_once:
                batch = prompts(c)
                t0 = time.perf_counter()
                with ThreadPoolExecutor(max_workers=c) as pool:
                    list(pool.map(ask, batch))
                out.append((c, time.perf_counter() - t0))
        except requests.RequestException:
            return []
        return out

    def check_alive(self, after: str) -> None:
        """A server that stopped answering ends the pass: the levels left would all break for it."""
        try:
            self._http.get(f"{self.base_url}/health", timeout=30).raise_for_status()
        except requests.RequestException as e:
            raise EngineFailed(f"the server stopped answering after capacity level {after}: {e}") from e


def summary_metrics(cfg: CapacityConfig, b: Bracket, pool: Level | None) -> list[Metric]:
    """Per prompt length: the load at the SLO and the level that broke it, the throughput there, the
    users the KV pool (as `pool` recorded it) holds whole, and whether a loaded host timed the bracket."""
    n, unit, at = b.length, UNITS[cfg.mode], b.at
    out = [Metric(name=at_slo_name(cfg, n), value=b.at_slo, kind=MetricKind.quantity, unit=unit, direction="higher",
                  length=n, n=at.completed if at else None)]
    if b.broke_at is not None:
        out.append(Metric(name=f"capacity/broke_at/ctx{n}", value=b.broke_at, unit=unit, length=n))
    if at is not None:
        out += [Metric(name=f"capacity/req_per_s_at_slo/ctx{n}", value=at.req_per_s or 0.0, unit="/s",
                       direction="higher", length=n),
                Metric(name=f"capacity/output_tok_per_s_at_slo/ctx{n}", value=at.output_tok_per_s or 0.0, unit="/s",
                       direction="higher", length=n)]
    users = kv_bound_users(pool.kv_cache_tokens, n, cfg.output_tokens, pool.block_size) if pool else None
    if users is not None:
        out.append(Metric(name=f"capacity/kv_bound_users/ctx{n}", value=users, unit="users", length=n))
    out.append(Metric(name=f"capacity/host_loaded/ctx{n}", value=1.0 if b.loaded else 0.0, unit="yes/no", length=n))
    if b.searched:
        out.append(Metric(name=f"capacity/levels_run/ctx{n}", value=len(b.tried), unit="levels", length=n))
        out.append(Metric(name=f"capacity/search_s/ctx{n}", value=b.spent_s, kind=MetricKind.timing, unit="s",
                          length=n))
        if b.predicted is not None:
            out.append(Metric(name=f"capacity/predicted_users/ctx{n}", value=b.predicted.users, unit="users",
                              length=n))
        if b.steps is not None:
            out.append(Metric(name=f"capacity/bracket_steps/ctx{n}", value=b.steps, unit="steps", length=n))
    return out


LEVEL_FIGURES = (("req_per_s", "/s", "higher"), ("output_tok_per_s", "/s", "higher"))


def level_metrics(cfg: CapacityConfig, lv: Level) -> list[Metric]:
    """One level's figures as `capacity/<figure>/ctx<L>_<level>`, for MLflow and `compare --format csv`."""
    tag = level_id(cfg, lv.length, lv.level)
    out = [Metric(name=f"capacity/met_slo/{tag}", value=1.0 if lv.met else 0.0, kind=MetricKind.quantity, unit="")]
    for key, unit, direction in LEVEL_FIGURES:
        if getattr(lv, key) is not None:
            out.append(Metric(name=f"capacity/{key}/{tag}", value=getattr(lv, key), unit=unit, direction=direction))
    for metric, by_q in lv.percentiles.items():
        for q, value in by_q.items():
            out.append(Metric(name=f"capacity/{metric}_ms_p{q}/{tag}", value=value, kind=MetricKind.timing, unit="ms",
                              direction="lower", percentile=int(float(q)), n=lv.completed))
    view = lv.server
    for key, value, unit in (("kv_usage_peak_pct", view.kv_usage_peak, "%"), ("preemptions", view.preemptions, "preemptions"),
                             ("running_peak", view.running_peak, "requests"),
                             ("prefix_hit_pct", view.prefix_hit_rate, "%")):
        if value is not None:
            out.append(Metric(name=f"capacity/{key}/{tag}", value=value * (100 if unit == "%" else 1), unit=unit))
    return out
