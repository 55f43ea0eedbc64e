"""The evidence a comparison sets side by side: which variants, against which baseline, each score's
interval and each candidate's paired delta on the items both answered, and the baseline's marks (at
chance, at ceiling) as the gate would judge them. report/compare.py lays it out as a table.

Every accuracy carries its 95% interval (Wilson for a proportion, normal over fixed strata for a
macro or balanced accuracy), and every accuracy delta its paired 95% interval (evalsuite.stats.
significance names the method); a task stopped early gets the gate's sequential bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import TTFT_P50, USABLE_STATUSES, VariantResult, task_of
from evalsuite.stats import CONFIDENCE
from evalsuite.stats.metrics import accuracy_interval
from evalsuite.stats.paired import difference_interval, pairing, unpaired
from evalsuite.stats.significance import two_sided
from evalsuite.verdict.baseline import baseline_ref
from evalsuite.verdict.informative import task_marks
from evalsuite.verdict.rules import chance_margins, default_rules_path, load_rules, run_rules_path
from evalsuite.verdict.sequential import stopped_interval


@dataclass
class Entry:
    """One variant of one run, under the label shown in tables and plots."""

    label: str
    run_dir: RunDir
    result: VariantResult


def label_entries(pairs: list[tuple[RunDir, VariantResult]]) -> list[str]:
    """A variant's name, or run:name where the name repeats across runs (run = the run folder's name)."""
    names = [v.variant for _, v in pairs]
    labels = [v.variant if names.count(v.variant) == 1 else f"{rd.run_id}:{v.variant}" for rd, v in pairs]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ConfigError(f"two run folders share the name and variant {', '.join(twice)}; rename a folder")
    return labels


def load_entries(sources: list[tuple[RunDir, set[str] | None]]) -> list[Entry]:
    """Variants of every source in order; a run folder given twice counts once."""
    pairs, seen = [], set()
    for rd, only in sources:
        record = rd.load_run()
        missing = sorted((only or set()) - {v.variant for v in record.variants})
        if missing:
            raise ConfigError(f"{rd.root}:{missing[0]}: no such variant in run {record.run_id} "
                              f"(allowed: {', '.join(v.variant for v in record.variants)})")
        for v in record.variants:
            key = (rd.root.resolve(), v.variant)
            if (only is None or v.variant in only) and key not in seen:
                seen.add(key)
                pairs.append((rd, v))
    return [Entry(label, rd, v) for (rd, v), label in zip(pairs, label_entries(pairs), strict=True)]


def pick_baseline(entries: list[Entry], wanted: str | None) -> Entry:
    """--baseline (NAME or RUN:NAME); else the first run's config `baseline`; else the first variant."""
    if not entries:
        raise ConfigError("compare: no variants to compare")
    if wanted is None:
        first = entries[0].run_dir
        named = first.read_config().get("baseline")
        match = [e for e in entries if e.run_dir.root == first.root and e.result.variant == named]
        return usable(match[0] if match else entries[0], entries)  # the config's baseline may not be among those picked
    rd, name = baseline_ref(wanted, [e.run_dir for e in entries])
    matches = [e for e in entries if e.result.variant == name
               and (rd is None or e.run_dir.root.resolve() == rd.root.resolve())]
    if len(matches) != 1:
        how = "is ambiguous, give RUN:NAME" if matches else "is not a variant of the runs given"
        raise ConfigError(f"--baseline: {wanted!r} {how} (allowed: {', '.join(e.label for e in entries)})")
    return usable(matches[0], entries)


def usable(base: Entry, entries: list[Entry]) -> Entry:
    """The baseline, if it has results to set the others against: a table of changes against a variant
    that failed or never started would be all blanks."""
    if base.result.status in USABLE_STATUSES:
        return base
    allowed = ", ".join(e.label for e in entries if e.result.status in USABLE_STATUSES) or "none"
    raise ConfigError(f"--baseline: {base.label} is {base.result.status} ({base.result.reason or 'no reason recorded'}): "
                      f"give one with results (allowed: {allowed})")


def flat_metrics(result: VariantResult) -> dict[str, float]:
    """Every number a variant produced: its metrics, then its engine stats as engine/<field>."""
    return {name: m.value for name, m in result.measured().items()}


def is_latency(metric: str) -> bool:
    """A figure of the latency pass, the one timed pass a loaded host slows."""
    return task_of(metric) == task_of(TTFT_P50)


@dataclass
class PairedDelta:
    """Candidate - baseline in points on the items both answered, with its two-sided 95% interval."""

    delta: float
    low: float
    high: float
    method: str
    n: int
    subset: bool  # fewer items than one of the two metrics counts: the delta differs from theirs
    sequence: bool = False  # the interval is a confidence sequence's (a task run under --stop decided)

    @property
    def outside(self) -> bool:
        """The change on the items scored lies outside the interval: a confidence sequence's running
        intersection can exclude it, since earlier looks may have bounded the change more tightly."""
        return not self.low - 1e-9 <= self.delta <= self.high + 1e-9


def paired_delta(base: Entry, cand: Entry, metric: str) -> PairedDelta | None:
    """Two-sided 95% interval of candidate - baseline in points, on the items both answered."""
    p = pairing(base.run_dir, base.result.variant, cand.run_dir, cand.result.variant, base.result.metric(metric))
    seq = stopped_interval(_rules(base), base.run_dir, base.result, cand.run_dir, cand.result,
                           metric, two_sided(CONFIDENCE)) if cand.result.stopped else None
    if seq is not None:  # a task stopped early (run --stop decided): the gate's sequential bounds
        low, high, test = -seq.high, -seq.low, seq
    elif p.n == 0:
        test = unpaired(base.result.metric(metric), cand.result.metric(metric), two_sided(CONFIDENCE))
        if test is None:
            return None
        low, high = -test.high, -test.low
    elif p.n >= 2 and p.smallest_cell >= 2:
        low, high, test = difference_interval(p, CONFIDENCE)
    else:
        return None
    counted = [m.n for m in (base.result.metric(metric), cand.result.metric(metric)) if m and m.n]
    subset = p.n > 0 and any(n > p.n for n in counted)
    # + 0.0: negating a drop of exactly 0 gives -0.0, printed "-0.0 pt" as if the candidate lost something
    return PairedDelta(-test.drop * 100 + 0.0, low * 100 + 0.0, high * 100 + 0.0, test.method.split(" (")[0], test.n,
                       subset, seq is not None)


def _rules(base: Entry):
    """The rules the baseline's run names (they split alpha as its --stop decided did), else the shipped ones."""
    try:
        return load_rules(run_rules_path(base.run_dir.read_config()))
    except ConfigError:
        return load_rules(default_rules_path())


def intervals(entries: list[Entry]) -> dict[tuple[str, str], tuple[float, float]]:
    """(label, metric) -> the 95% interval of every score of every variant."""
    out = {}
    for e in entries:
        for m in e.result.metrics:
            if m.item_score:
                ci = accuracy_interval(m, CONFIDENCE)
                if ci is not None:
                    out[(e.label, m.name)] = ci
    return out


def paired_deltas(base: Entry, entries: list[Entry], metrics: list[str]) -> dict[tuple[str, str], PairedDelta]:
    """(label, metric) -> each usable candidate's paired delta against `base` on `metrics`' scores."""
    out = {}
    for e in entries:
        if e is base or e.result.status not in USABLE_STATUSES:
            continue
        for metric in metrics:
            found = base.result.metric(metric)
            if found and found.item_score and e.result.metric(metric):
                found = paired_delta(base, e, metric)
                if found is not None:
                    out[(e.label, metric)] = found
    return out


def baseline_marks(base: Entry, metrics: list[str]) -> dict[str, str]:
    """The baseline's metric -> at chance / at ceiling, by the rules its run names, else the shipped ones."""
    try:
        rules = load_rules(run_rules_path(base.run_dir.read_config()))
    except ConfigError:
        rules = load_rules(default_rules_path())
    return task_marks(base.result, base.run_dir, rules.ceiling, chance_margins(rules, metrics))
