"""The capacity pass on the page, compare's cells and the run summary (evalsuite.verdict.capacity judges it)."""

from __future__ import annotations

from dataclasses import dataclass

from evalsuite.capacity.config import CapacityConfig, slo_term
from evalsuite.capacity.predict import kv_bound_users
from evalsuite.capacity.sweep import Bracket
from evalsuite.core.types import Prediction, VariantResult
from evalsuite.verdict.capacity import AT_SLO, Sweeps, is_capacity, length_of, sweeps

HEADLINE = (*AT_SLO, "capacity/output_tok_per_s_at_slo/ctx")  # the rows compare shows by default


def headline_rows(cols: list[str]) -> list[str]:
    """The capacity rows compare shows by default: load at the SLO and throughput there, per length."""
    return [c for c in cols if c.startswith(HEADLINE)]


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
