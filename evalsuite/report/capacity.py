"""The capacity pass as compare, gate and the report page read it back (evalsuite.capacity writes it).

A variant's sweeps come from its samples/capacity.jsonl (one Level a row) and the run's config
(the levels it declared). The gate's capacity check sets two brackets side by side: each variant's
capacity lies in [the highest level meeting the SLO, the level that broke it), so a drop is shown
beyond the limit only where even the candidate's best case is below (1 - limit) x the baseline's
worst, and within it only where the candidate's worst case reaches (1 - limit) x the baseline's
best. Levels too far apart to tell either say so, as an insufficient n does. Each level's verdict
is a point comparison of the percentile the load generator measured over its >= 100 requests, as
the latency checks are. A bracket that a loaded host timed is marked and never gated.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from evalsuite.capacity.config import CapacityConfig, slo_term
from evalsuite.capacity.predict import kv_bound_users
from evalsuite.capacity.sweep import Bracket, Level, bracket
from evalsuite.capacity.task import CapacityTask
from evalsuite.core.records import RunDir
from evalsuite.core.types import Prediction, VariantResult

TASK = CapacityTask.name
AT_SLO = ("capacity/users_at_slo/ctx", "capacity/rate_at_slo/ctx")  # the gated metrics, by prefix
HEADLINE = (*AT_SLO, "capacity/output_tok_per_s_at_slo/ctx")  # the rows compare shows by default


@dataclass
class Sweeps:
    """One variant's capacity pass: its config, its level records, a bracket per prompt length."""

    cfg: CapacityConfig
    levels: list[Level]
    brackets: dict[int, Bracket]


def sweeps(rd: RunDir, result: VariantResult) -> Sweeps | None:
    """The variant's capacity pass as recorded; None where it has none."""
    rows = rd.load_samples(result.variant, TASK)
    raw = rd.read_config().get("capacity") if rows else None
    if not rows or not isinstance(raw, dict):
        return None
    try:
        cfg = CapacityConfig.model_validate(raw)
        levels = [Level.model_validate(r["score"]["extra"]) for r in rows]
    except (ValidationError, KeyError, TypeError):
        return None
    return Sweeps(cfg, levels, {n: bracket(levels, cfg.levels, n, cfg.mode) for n in cfg.prompt_tokens})


def is_capacity(metric: str) -> bool:
    return metric.startswith("capacity/")


def is_at_slo(metric: str) -> bool:
    """The load at the SLO of one prompt length: what the gate judges bracket against bracket."""
    return metric.startswith(AT_SLO)


def headline_rows(cols: list[str]) -> list[str]:
    """The capacity rows compare shows by default: load at the SLO and throughput there, per length."""
    return [c for c in cols if c.startswith(HEADLINE)]


def length_of(metric: str) -> int | None:
    tail = metric.rsplit("/ctx", 1)[-1]
    return int(tail) if tail.isdigit() else None


def bracket_for(rd: RunDir, result: VariantResult, metric: str) -> tuple[Sweeps, Bracket] | None:
    found = sweeps(rd, result)
    n = length_of(metric)
    if found is None or n not in found.brackets:
        return None
    return found, found.brackets[n]


# ---------------------------------------------------------------- the gate's check


def _sup(b: Bracket) -> float | None:
    """The most the capacity can be: below the level that broke it (a whole number of users below it)."""
    if b.broke_at is None:
        return None
    return b.broke_at - 1 if b.mode == "concurrency" else b.broke_at


def _workload(s: Sweeps) -> tuple:
    c = s.cfg
    return c.output_tokens, c.range_ratio, c.mode, c.burstiness if c.mode == "request_rate" else None, \
        tuple(sorted(c.slo.items()))


@dataclass
class Verdict:
    status: str  # pass | fail | skip | uninformative | insufficient
    detail: str
    change: float | None = None  # drop at the grid points, percent


def judge_brackets(base: Sweeps, b: Bracket, cand: Sweeps, c: Bracket, limit_pct: float) -> Verdict:
    """Candidate bracket against the baseline's at `limit_pct` fewer users (or requests/s) at most."""
    if _workload(base) != _workload(cand):
        return Verdict("fail", "not the same workload (output tokens, lengths' spread, arrivals or SLO differ)")
    if b.loaded or c.loaded:
        who = " and ".join(x for x, y in (("baseline", b), ("candidate", c)) if y.loaded)
        return Verdict("skip", f"not gated: the {who}'s levels were timed on a loaded host ({c.text()})")
    keep = 1 - limit_pct / 100
    shown = f"baseline {b.text()}; candidate {c.text()}"
    change = (b.at_slo - c.at_slo) / b.at_slo * 100 if b.at_slo else None
    sup_b, sup_c = _sup(b), _sup(c)
    if sup_b is not None and sup_b <= 0:
        return Verdict("uninformative", f"the baseline met the SLO at no level, so no loss can show; {shown}", change)
    if sup_c is not None and (sup_c < keep * b.at_slo if c.mode == "concurrency" else sup_c <= keep * b.at_slo):
        return Verdict("fail", f"shown beyond the limit: even at its best the candidate holds under "
                               f"{keep:.0%} of the baseline's least; {shown}", change)
    if sup_b is not None and c.at_slo >= keep * sup_b:
        return Verdict("pass", f"shown within the limit: at its least the candidate holds >= {keep:.0%} of the "
                               f"baseline's most; {shown}", change)
    why = "the baseline's capacity lies beyond the sweep" if sup_b is None else "the levels are too far apart"
    return Verdict("insufficient", f"insufficient resolution: {why} to tell a {limit_pct:g}% drop (levels within "
                                   f"{limit_pct:g}% of each other around the capacity would); {shown}", change)


# ---------------------------------------------------------------- the report's figures


def kv_users(result: VariantResult, s: Sweeps, length: int, predicted: bool) -> int | None:
    """Users whose whole requests the KV pool holds at once: the planner's pool (`predicted`, as
    `evalsuite plan` predicts it) or the engine's own."""
    if predicted:
        p = result.predicted or Prediction()
        return kv_bound_users(p.kv_capacity_tokens, length, s.cfg.output_tokens, p.block_size, p.max_num_seqs)
    e = result.engine
    return kv_bound_users(e.kv_cache_tokens, length, s.cfg.output_tokens, e.block_size,
                          (result.settings or {}).get("max_num_seqs"))


def cell(b: Bracket) -> str:
    """A bracket in a table cell: `8 users (16 broke)`, `>= 32 users`, † where a loaded host timed it."""
    mark = "†" if b.loaded else ""
    if b.censored:
        return f">= {b.at_slo:g} {b.unit}{mark}"
    return f"{b.at_slo:g} {b.unit} ({b.broke_at:g} broke){mark}"




# ---------------------------------------------------------------- compare's cells


def loaded_at(values: dict[str, float], metric: str) -> bool:
    """Whether a capacity figure's prompt length was swept on a loaded host, by the variant's own
    `capacity/host_loaded/ctx<L>` (`values`: its flat metrics)."""
    n = length_of(metric)
    return is_capacity(metric) and n is not None and values.get(f"capacity/host_loaded/ctx{n}") == 1


def loaded_note(loaded: list[str]) -> str | None:
    """What the mark beside capacity figures says, naming the variants it marks; None where none is."""
    if not loaded:
        return None
    return (f"† beside a capacity figure: levels timed on a loaded host (its 1-minute load, less a CPU engine's own "
            f"threads, above the CPUs left free), marked and never gated: {', '.join(loaded)}")


# ---------------------------------------------------------------- the report page


@dataclass
class View:
    """Every variant's capacity pass on a report page: variant -> (its result, its sweeps), the first
    run folder that swept it, and the prompt lengths swept."""

    swept: dict[str, tuple[VariantResult, Sweeps]]
    lengths: list[int]

    @property
    def cfg(self) -> CapacityConfig:
        """The workload of the first variant swept (the gate refuses to compare unlike ones)."""
        return next(iter(self.swept.values()))[1].cfg

    def decision_columns(self) -> list[str]:
        return [f"at SLO @{n:,}" for n in self.lengths]

    def decision_cells(self, name: str) -> list[str]:
        got = self.swept.get(name)
        return [cell(got[1].brackets[n]) if got and n in got[1].brackets else "-" for n in self.lengths]

    def slo_text(self) -> str:
        s = self.cfg
        terms = ", ".join(f"{k.removesuffix('_ms').replace('_', ' ')} <= {v:g} ms" for k, v in s.slo.items())
        return (f"SLO {terms}; {s.requests} requests a level ({s.warmups} warm-up), {s.output_tokens} output tokens, "
                f"{'closed loop of N users' if s.mode == 'concurrency' else 'Poisson arrivals' if s.burstiness == 1 else 'gamma arrivals'}")

    def picks(self, allowed: list[str]) -> list[list[str]]:
        """Per prompt length, the variant of `allowed` (within the accuracy limits) with the most users at
        the SLO: objective, variant, figure, why (the report's "what to serve" rows)."""
        out = []
        for n in self.lengths:
            have = {name: s.brackets[n] for name, (_, s) in self.swept.items() if name in allowed and n in s.brackets}
            objective = f"most {'users' if self.cfg.mode == 'concurrency' else 'requests/s'} at the SLO, {n:,}-token prompts"
            if not have:
                out.append([objective, "-", "-", "no variant within the accuracy limits swept it"])
                continue
            best = max(have, key=lambda name: have[name].at_slo)
            tied = sorted(x for x, b in have.items() if b.at_slo == have[best].at_slo)
            why = f"best of {len(have)} variant(s) within the accuracy limits"
            out.append([objective, ", ".join(tied), cell(have[best]), why + (" (tied on the levels swept)" if len(tied) > 1 else "")])
        return out

    def table(self, n: int) -> tuple[list[str], list[list[str]]]:
        terms = [slo_term(k) for k in self.cfg.slo]
        cols = ["variant", "at SLO", "what broke it", "req/s at SLO", "output tok/s at SLO",
                " / ".join(f"{m.upper()} p{q:g}" for m, q in terms) + " ms at SLO", "peak KV use at SLO",
                "KV-bound users (engine's pool)", "predicted (plan)", "host"]
        rows = []
        for name, (result, s) in self.swept.items():
            b = s.brackets.get(n)
            if b is None:
                continue
            at = b.at
            lat = " / ".join(_fmt(at.percentile(m, q) if at else None, "{:,.1f}") for m, q in terms)
            kv = f"{at.server.kv_usage_peak:.0%}" if at and at.server.kv_usage_peak is not None else "-"
            rows.append([name, cell(b), b.why or ("-" if b.missing == [] else "levels not run"),
                         _fmt(at.req_per_s if at else None, "{:.2f}"), _fmt(at.output_tok_per_s if at else None, "{:,.0f}"),
                         lat, kv, _fmt(kv_users(result, s, n, predicted=False), "{:,}"),
                         _fmt(kv_users(result, s, n, predicted=True), "{:,}"), _host(b)])
        return cols, rows

    def plot(self, n: int, path) -> object | None:
        """Output tokens/s against each SLO latency, one line per variant through its levels (labelled),
        the SLO's limits dashed: where a variant's curve crosses its limit is its capacity."""
        from evalsuite.report.plots import _grid, _save, _style

        keys = list(self.cfg.slo)
        fig, axes = _grid(len(keys), f"throughput against latency, {n:,}-token prompts")
        drawn = False
        for ax, key in zip(axes, keys, strict=False):
            metric, q = slo_term(key)
            for i, (name, (_, s)) in enumerate(self.swept.items()):
                pts = [(lv.percentile(metric, q), lv.output_tok_per_s, lv.level) for lv in s.levels
                       if lv.length == n and lv.status == "ok" and lv.percentile(metric, q) is not None]
                if not pts:
                    continue
                drawn = True
                xs, ys, tags = zip(*sorted(pts, key=lambda p: p[2]), strict=True)
                ax.plot(xs, ys, label=name, **_style(i))
                for x, y, tag in zip(xs, ys, tags, strict=True):
                    ax.annotate(f"{tag:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
            ax.axvline(self.cfg.slo[key], ls="--", color="grey", lw=1)
            ax.set_xlabel(f"{metric.upper()} p{q:g} (ms)")
            ax.set_ylabel("output tokens/s")
            ax.grid(alpha=0.3)
        if not drawn:
            return None
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 4), fontsize=8)
        return _save(fig, path)


def _fmt(v, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _host(b: Bracket) -> str:
    loads = [lv.host_load for lv in ([b.at] if b.at else []) if lv.host_load is not None]
    if not loads:
        return "-"
    load = loads[0]
    return f"1-min load {load.peak:.1f} on {load.cpus} CPUs" + (" †" if b.loaded else "")


def view(entries) -> View | None:
    """The capacity view of a report's entries (label, run_dir, result), each variant from the first
    run folder that swept it; None where none did."""
    swept: dict[str, tuple[VariantResult, Sweeps]] = {}
    for e in entries:
        if e.result.variant not in swept and (s := sweeps(e.run_dir, e.result)) is not None:
            swept[e.result.variant] = (e.result, s)
    if not swept:
        return None
    return View(swept, sorted({n for _, s in swept.values() for n in s.brackets}))


# ---------------------------------------------------------------- the run summary


def summary_columns(variants: list[VariantResult]) -> list[str]:
    """The load-at-the-SLO metrics any variant recorded, shortest prompt first."""
    names = {m.name for v in variants for m in v.metrics if m.name.startswith(AT_SLO)}
    return sorted(names, key=lambda n: length_of(n) or 0)


def summary_cell(v: VariantResult, name: str) -> str:
    """`2 (4 broke)`, `>= 4`, `-`; † where a loaded host timed it, from the variant's own metrics."""
    at, n = v.metric(name), length_of(name)
    if at is None:
        return "-"
    broke, loaded = v.metric(f"capacity/broke_at/ctx{n}"), v.metric(f"capacity/host_loaded/ctx{n}")
    mark = "†" if loaded is not None and loaded.value == 1 else ""
    return (f"{at.value:g} ({broke.value:g} broke)" if broke is not None else f">= {at.value:g}") + mark
