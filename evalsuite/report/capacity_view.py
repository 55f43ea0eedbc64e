"""The capacity pass on the page, compare's cells and the run summary (evalsuite.verdict.capacity judges it)."""

from __future__ import annotations

from dataclasses import dataclass

from evalsuite.capacity.config import CapacityConfig, slo_term
from evalsuite.capacity.predict import kv_bound_users
from evalsuite.capacity.sweep import Bracket
from evalsuite.core.types import Prediction, VariantResult
from evalsuite.verdict.capacity import AT_SLO, NOT_COMPARABLE, Sweeps, comparable, is_capacity, length_of, sweeps

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
                          result.settings.max_num_seqs)


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
        per = (f"{s.search.rounds:g} requests a user, {s.search.min_requests}-{s.requests} a level" if s.searching
               else f"{s.requests} requests a level")
        how = (f"users searched on a grid of factor {s.search.step:.3g} ({s.levels[0]:g}-{s.levels[-1]:g}) from a predicted "
               "level until the bracket is one step wide; " if s.searching else "")
        return (f"SLO {terms}; {how}{per} ({s.warmups} warm-up), {s.output_tokens} output tokens, "
                f"{'closed loop of N users' if s.mode == 'concurrency' else 'Poisson arrivals' if s.burstiness == 1 else 'gamma arrivals'}")

    def device(self, name: str) -> str | None:
        return self.swept[name][0].engine.device

    def reference(self, baseline: str | None) -> str:
        """The variant others are set beside: the baseline where it was swept, else the first swept."""
        return baseline if baseline in self.swept else next(iter(self.swept))

    def not_comparable(self, name: str, ref: str, n: int) -> str | None:
        """Why `name`'s bracket at length n cannot be set beside `ref`'s (evalsuite.verdict.capacity)."""
        a, b = self.swept[ref][1].brackets.get(n), self.swept[name][1].brackets.get(n)
        if a is None or b is None:
            return "not swept at this length"
        return comparable(self.device(ref), a, self.device(name), b)

    def picks(self, allowed: list[str], baseline: str | None = None) -> list[list[str]]:
        """Per prompt length, the variant of `allowed` (within the accuracy limits) with the most users at
        the SLO, among those measured as the baseline was (one device model, a quiet host): objective,
        variant, figure, why (the report's "what to serve" rows). A pick never rests on a bracket that
        is not comparable."""
        out = []
        for n in self.lengths:
            unit = "users" if self.cfg.mode == "concurrency" else "requests/s"
            objective = f"most {unit} at the SLO at {n:,} tokens"
            within = [name for name in self.swept if name in allowed and n in self.swept[name][1].brackets]
            if not within:
                out.append([objective, "-", "-", "no variant within the accuracy limits swept it"])
                continue
            ref = self.reference(baseline)
            off = {name: why.removeprefix(f"{NOT_COMPARABLE}: ") for name in within
                   if (why := self.not_comparable(name, ref, n))}
            have = {name: self.swept[name][1].brackets[n] for name in within if name not in off}
            left = f"; not comparable, left out: {', '.join(f'{k} ({v})' for k, v in off.items())}" if off else ""
            if not have:
                out.append([objective, "-", "-", f"none measured as `{ref}` was{left}"])
                continue
            best = max(have, key=lambda name: have[name].at_slo)
            tied = sorted(x for x, b in have.items() if b.at_slo == have[best].at_slo)
            why = f"best of {len(have)} variant(s) within the accuracy limits"
            out.append([objective, ", ".join(tied), cell(have[best]),
                        why + (" (tied on the levels measured)" if len(tied) > 1 else "") + left])
        return out

    def users_table(self, verdicts: dict[str, str], baseline: str | None) -> tuple[list[str], list[list[str]]]:
        """Users at the SLO per variant and length beside its accuracy verdict, the users its KV pool
        holds whole (the KV-bound prediction) and its users against the baseline's."""
        ref = self.reference(baseline)
        cols = ["variant", "verdict"]
        for n in self.lengths:
            cols += [f"users at SLO @{n:,}", f"KV-bound @{n:,}", f"x {ref} @{n:,}"]
        rows = []
        for name, (result, s) in self.swept.items():
            row = [name, verdicts.get(name, "-")]
            for n in self.lengths:
                b = s.brackets.get(n)
                row += ["-", "-", "-"] if b is None else [cell(b), _fmt(kv_users(result, s, n, predicted=False), "{:,}"),
                                                          self.ratio(name, ref, n)]
            rows.append(row)
        return cols, rows

    def ratio(self, name: str, ref: str, n: int) -> str:
        """`2.0x` (users at the SLO over the reference's, lower ends of both brackets), or why none."""
        if name == ref:
            return "1 (reference)"
        if (why := self.not_comparable(name, ref, n)) is not None:
            return NOT_COMPARABLE
        a, b = self.swept[ref][1].brackets[n], self.swept[name][1].brackets[n]
        if not a.at_slo:
            return "- (reference met it at no level)"
        return f"{b.at_slo / a.at_slo:.2f}x" + ("" if a.broke_at is not None and b.broke_at is not None else " (open above)")

    def ratios(self, baseline: str | None) -> dict[str, dict[str, float]]:
        """variant -> {capacity/users_vs_baseline/ctx<L>: users at the SLO over the baseline's} where the
        two brackets are comparable and the baseline met it at some level (MLflow's figures). The
        baseline's own is 1 on any host (the users table's reference row): set beside itself, no condition differs."""
        if baseline not in self.swept:
            return {}
        out: dict[str, dict[str, float]] = {}
        for name in self.swept:
            for n in self.lengths:
                a, b = self.swept[baseline][1].brackets.get(n), self.swept[name][1].brackets.get(n)
                if a is None or b is None or not a.at_slo:
                    continue
                if name != baseline and self.not_comparable(name, baseline, n):
                    continue
                out.setdefault(name, {})[f"capacity/users_vs_baseline/ctx{n}"] = b.at_slo / a.at_slo
        return out

    def headlines(self, baseline: str | None, accuracy: dict[str, str]) -> list[str]:
        """One line per candidate and length, the answer in the form a planner quotes, e.g. `kv_fp8: 2.00x
        the users of bf16 at 32,512 tokens within TTFT p90 <= 2000 ms, ITL p90 <= 50 ms (8 users against 4),
        at -0.3 [-0.8, +0.1] pt mmlu/acc`; only where the two brackets are comparable."""
        if baseline not in self.swept:
            return []
        within = ", ".join(f"{m.upper()} p{q:g} <= {v:g} ms" for (m, q), v in
                           ((slo_term(k), v) for k, v in self.cfg.slo.items()))
        out = []
        for name in self.swept:
            for n in self.lengths:
                if name == baseline or n not in self.swept[name][1].brackets or self.not_comparable(name, baseline, n):
                    continue
                a, b = self.swept[baseline][1].brackets[n], self.swept[name][1].brackets[n]
                if not a.at_slo:
                    continue
                at = f", at {accuracy[name]}" if accuracy.get(name) else ""
                out.append(f"`{name}`: {b.at_slo / a.at_slo:.2f}x the {a.unit} of `{baseline}` at {n:,} tokens within "
                           f"{within} ({cell(b)} against {cell(a)}){at}")
        return out

    def table(self, n: int) -> tuple[list[str], list[list[str]]]:
        terms = [slo_term(k) for k in self.cfg.slo]
        cols = ["variant", "at SLO", "what broke it", "req/s at SLO", "output tok/s at SLO",
                " / ".join(f"{m.upper()} p{q:g}" for m, q in terms) + " ms at SLO", "peak KV use at SLO",
                "KV-bound users (engine's pool)", "predicted (plan)", "levels (requests)", "host"]
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
                         _fmt(kv_users(result, s, n, predicted=True), "{:,}"), _levels(b, s), _host(b)])
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


def _levels(b: Bracket, s: Sweeps) -> str:
    """The levels measured, each with its completed requests, in the order a search tried them; and
    where the search started and why it stopped."""
    mine = {lv.level: lv for lv in s.levels if lv.length == b.length}
    order = b.tried if b.searched else sorted(mine)
    text = ", ".join(f"{x:g} ({mine[x].completed})" + ("" if mine[x].status == "ok" else " broken")
                     for x in order if x in mine) or "-"
    if not b.searched:
        return text
    start = f"from {b.predicted.users:,} predicted ({b.predicted.basis}); " if b.predicted else ""
    return f"{start}{text}; {b.stopped}, {b.spent_s:,.0f} s"


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
