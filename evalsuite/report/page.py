"""What to serve, from run folders: each variant's gate verdict, memory, speed and accuracy change
against one baseline, and the variants that answer a few stated objectives.

One row per (run folder, variant): a name that appears in two folders is labelled by its folder
(`RUN:NAME`), and each row's figures and verdict are its own folder's, never pooled with another
folder's variant of the same name. A folder that holds the baseline is compared and gated against its
own, measured under the same conditions; a folder without it (variants run on other days, or with -V
into folders of their own) against the baseline's folder (RUN of --baseline RUN:NAME, else the first
folder that holds it), paired on the items both answered as `gate` pairs them, so one variant gets
the same verdict alone in its folder or beside the others. A folder's own variant of the baseline's
name (a rerun, another engine mode) is judged too, against the baseline's folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import ITL_P50, TTFT_P50, USABLE_STATUSES, HostLoad, TimingCondition, timing_unlike
from evalsuite.core.units import GIB
from evalsuite.verdict.baseline import baseline_ref
from evalsuite.verdict.capacity import NOT_COMPARABLE
from evalsuite.report.compare import Comparison, compare
from evalsuite.verdict.compare import Entry, PairedDelta, label_entries
from evalsuite.verdict.gate import GateReport, failed_checks_line, run_gate
from evalsuite.verdict.sides import Side
from evalsuite.report.names import loaded_mark
from evalsuite.verdict.rules import Rules, default_rules_path, run_rules_path
from evalsuite.report.plots import front_labels
from evalsuite.stats.metrics import accuracy_interval

TTFT, ITL = f"{TTFT_P50}/ctx", f"{ITL_P50}/ctx"
# ---------------------------------------------------------------- one row per variant


Key = tuple[Path, str]  # (the run folder, resolved; the variant): what a row is


def key_of(e: Entry) -> Key:
    return e.run_dir.root.resolve(), e.result.variant


@dataclass
class Row:
    name: str  # the variant's name, or RUN:NAME where two folders hold that name
    status: str
    baseline: bool = False
    verdict: str | None = None
    failing: str = ""  # the checks that failed it, where the verdict is `failed`
    accuracy_ok: bool | None = None  # the gate's accuracy checks all passed on evidence (accuracy_verdict)
    weights_gib: float | None = None
    kv_tokens: int | None = None
    kv_bytes_per_token: int | None = None
    kv_cache_gib: float | None = None
    ttft: dict[int, float] = field(default_factory=dict)  # prompt tokens -> p50 ms
    itl: dict[int, float] = field(default_factory=dict)
    host_load: HostLoad | None = None  # over the latency pass that timed ttft and itl
    timing: TimingCondition | None = None  # how that pass was timed
    timed_apart: str | None = None  # why its ttft and itl do not compare with the baseline's (None: they do)
    not_comparable: str = ""  # a check of its gate that compared nothing (a latency or capacity figure timed otherwise)
    accuracy: dict[str, float] = field(default_factory=dict)  # primary metric -> value
    interval: dict[str, tuple[float, float]] = field(default_factory=dict)
    n: dict[str, int] = field(default_factory=dict)
    delta: dict[str, PairedDelta] = field(default_factory=dict)
    changed: dict[str, float] = field(default_factory=dict)  # primary metric -> share of answers changed
    control: bool = False  # a variant the config names under `controls:`: the engine's own noise
    pareto: list[str] = field(default_factory=list)  # primary metrics on whose weights front it lies
    runs: list[str] = field(default_factory=list)
    entry: Entry | None = None  # the folder's variant behind the row

    @property
    def tokens_per_gib(self) -> float | None:
        """Tokens the engine holds per GiB of its KV cache, as its own capacity says: a model with
        sliding-window layers keeps only a window of them, so bytes per token (every layer
        full) would understate it."""
        if self.kv_tokens and self.kv_cache_gib:
            return self.kv_tokens / self.kv_cache_gib
        return GIB / self.kv_bytes_per_token if self.kv_bytes_per_token else None


@dataclass
class RunPart:
    """One run folder: its comparison against its own baseline and its gate."""

    run_dir: RunDir
    comparison: Comparison
    has_baseline: bool  # its variants have a baseline to be set against, its own or another folder's
    gate: GateReport | None = None
    latency_length: int | None = None  # single_length: the one prompt length its latency pass timed
    foreign: str | None = None  # the label of another folder's baseline its variants are set against
    skip: str | None = None  # its own baseline where another part judges it against the baseline's folder

    @property
    def entries(self) -> list[Entry]:
        """The folder's own variants (another folder's baseline, compared against, is that folder's)."""
        return [e for e in self.comparison.entries if e.label != self.foreign and e.result.variant != self.skip]


@dataclass
class Report:
    baseline: str
    rules_path: str
    rules: Rules
    parts: list[RunPart]
    rows: list[Row]
    primary: list[str]
    marks: dict[str, str] = field(default_factory=dict)  # the baseline's metric -> at chance / at ceiling
    labels: dict[Key, str] = field(default_factory=dict)  # each (folder, variant) -> its row's name

    def label(self, e: Entry) -> str:
        return self.labels.get(key_of(e), e.result.variant)

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def lengths(self) -> list[int]:
        return sorted({n for r in self.rows for n in r.ttft})

    def entries(self) -> list[Entry]:
        return [e for p in self.parts for e in p.entries]


def _by_run(sources: list[tuple[RunDir, set[str] | None]]) -> list[tuple[RunDir, set[str] | None]]:
    """One source per run folder, the variants picked in it united (None: all of them)."""
    merged: dict[Path, tuple[RunDir, set[str] | None]] = {}
    for rd, only in sources:
        key = rd.root.resolve()
        if key in merged:
            prev = merged[key][1]
            only = None if prev is None or only is None else prev | only
        merged[key] = (merged.get(key, (rd,))[0], only)
    return list(merged.values())


def baseline_name(sources: list[tuple[RunDir, set[str] | None]], wanted: str | None) -> tuple[str, RunDir | None]:
    """--baseline (NAME or RUN:NAME, as compare takes it), else the first folder's config `baseline`,
    else its first variant; with the folder RUN:NAME named, else None."""
    if wanted:
        rd, name = baseline_ref(wanted, [r for r, _ in sources])
        known = {v.variant for r in ([rd] if rd else [r for r, _ in sources]) for v in r.load_run().variants}
        if name not in known:
            where = f"run {rd.run_id}" if rd else "the runs given"
            raise ConfigError(f"--baseline: {wanted!r} is not a variant of {where} (allowed: {', '.join(sorted(known))})")
        return name, rd
    rd = sources[0][0]
    named = rd.read_config().get("baseline")
    names = [v.variant for v in rd.load_run().variants]
    if named in names:
        return named, None
    if not names:
        raise ConfigError(f"{rd.root}: the run has no variants")
    return names[0], None


def _holds(rd: RunDir, base: str) -> bool:
    v = rd.load_run().variant(base)
    return v is not None and v.status in USABLE_STATUSES


def home_folder(sources: list[tuple[RunDir, set[str] | None]], base: str, named: RunDir | None) -> RunDir | None:
    """The folder whose baseline judges the folders that hold none: RUN of RUN:NAME, else the first
    folder given that holds a usable NAME."""
    if named is not None:
        return named if _holds(named, base) else None
    return next((rd for rd, _ in sources if _holds(rd, base)), None)


def _parts(rd: RunDir, only: set[str] | None, base: str, home: RunDir | None, rules: Rules,
           rules_path: str, known: GateReport | None = None) -> list[RunPart]:
    """The folder's part, and, where it holds a variant of the baseline's name but is not the
    baseline's folder, that variant judged against the baseline's folder (every folder is judged)."""
    part = _part(rd, only, base, home, rules, rules_path, known)
    rerun = home is not None and rd.root.resolve() != home.root.resolve() and _holds(rd, base) and \
        (only is None or base in only)
    if not rerun:
        return [part]
    part.skip = base
    comparison = compare([(home, {base}), (rd, {base})], f"{home.root}:{base}")
    other = RunPart(rd, comparison, True, latency_length=part.latency_length, foreign=comparison.baseline)
    other.gate = _gate(Side(home, base), [Side(rd, base)], rules, rules_path)
    return [other, part]  # the folder's own baseline first, as in a folder that is the baseline's


def _gate(base: Side, sides: list[Side], rules: Rules, rules_path: str) -> GateReport | None:
    try:
        return run_gate(base, sides, rules, rules_path)
    except ConfigError:
        return None  # no metric of this folder matched a rule, or nothing to judge: figures without a verdict


def _part(rd: RunDir, only: set[str] | None, base: str, home: RunDir | None, rules: Rules, rules_path: str,
          known: GateReport | None = None) -> RunPart:
    """A folder that holds the baseline is set against its own (measured under the same conditions);
    one that does not, against the home folder's, on the items both answered, as `gate` pairs them.
    `known`: the folder's whole gate under these rules, where a caller has it already."""
    names = {v.variant: v for v in rd.load_run().variants}
    own = base in names and names[base].status in USABLE_STATUSES
    if own or home is None:
        picked = None if only is None else (only | {base} if own else only)
        comparison = compare([(rd, picked)], base if own else None)
        base_rd = rd
    else:
        picked = (set(names) if only is None else only) - {base}
        comparison = compare([(home, {base}), (rd, picked)], f"{home.root}:{base}")
        base_rd = home
    part = RunPart(rd, comparison, own or home is not None, latency_length=single_length(rd),
                   foreign=None if own or home is None else comparison.baseline)
    candidates = [e.result.variant for e in comparison.entries if e.result.variant != base]
    if part.has_baseline and candidates:
        # the whole folder as the run summary asks for it (its verdicts, the same gate), else the variants picked
        whole = only is None and own
        sides = [Side(rd)] if whole else [Side(rd, c) for c in candidates]
        asked = known is not None and whole and (known.baseline, known.rules_path, known.rules) == (base, rules_path, rules)
        part.gate = known if asked else _gate(Side(base_rd, base), sides, rules, rules_path)
    return part


def build(sources: list[tuple[RunDir, set[str] | None]], baseline: str | None, rules: Rules,
          rules_path: str, known: GateReport | None = None) -> Report:
    """`known`: where `sources` is one run folder, its gate (every variant against its baseline under
    these rules) as the run summary computed it, so that the end of a run judges once."""
    if not sources:
        raise ConfigError("report: give at least one run folder")
    sources = _by_run(sources)
    base, named = baseline_name(sources, baseline)
    home = home_folder(sources, base, named)
    known = known if len(sources) == 1 else None
    parts = [p for rd, only in sources for p in _parts(rd, only, base, home, rules, rules_path, known)]
    primary = list(dict.fromkeys(m for p in parts for m in p.comparison.primary))
    report = Report(base, rules_path, rules, parts, [], primary)
    own = list({key_of(e): e for p in parts for e in p.entries}.values())
    report.labels = dict(zip((key_of(e) for e in own), label_entries([(e.run_dir, e.result) for e in own]), strict=True))
    home_key = (home.root.resolve(), base) if home is not None else None
    rows: dict[Key, Row] = {}
    for part in parts:
        for entry in part.entries:
            k = key_of(entry)
            row = rows.setdefault(k, Row(report.labels[k], entry.result.status, entry=entry, baseline=k == home_key or
                                         (home_key is None and entry.result.variant == base)))
            _fill(row, part, entry, primary)
        if part.has_baseline and part.foreign is None:
            report.marks = {**part.comparison.marks, **report.marks}
        if part.gate is not None:
            _judge(rows, part)
    report.rows = list(rows.values())
    _timed_alike(report)
    _mark_pareto(report)
    return report


def _timed_alike(report: Report) -> None:
    """Each timed row's reason its speed does not compare with the baseline's (core.types.timing_unlike,
    or a loaded host), as the gate's latency checks say; the baseline's own doubt on its own row.
    Without a timed baseline, the first timed row stands in for it."""
    timed = [r for r in report.rows if r.ttft]
    ref = next((r for r in timed if r.baseline), timed[0] if timed else None)
    for r in timed:
        own = r.timing.doubt() if r.timing is not None else None
        loaded = "timed on a loaded host" if r.host_load is not None and r.host_load.loaded else None
        unlike = None if r is ref else timing_unlike(ref.timing, r.timing)
        r.timed_apart = own or loaded or unlike


def _fill(row: Row, part: RunPart, entry: Entry, primary: list[str]) -> None:
    """Figures this folder adds to the variant's row; earlier folders keep theirs."""
    v = entry.result
    row.runs.append(part.run_dir.run_id)
    if row.weights_gib is None and v.engine.weights_gib is not None:
        row.weights_gib, row.kv_tokens = v.engine.weights_gib, v.engine.kv_cache_tokens
        row.kv_bytes_per_token, row.kv_cache_gib = v.engine.kv_bytes_per_token, v.engine.kv_cache_gib
    if not row.ttft:
        row.host_load, row.timing = v.host_load, v.timed_as()
        only = part.latency_length
        for m in v.metrics:
            for pooled, prefix, into in ((TTFT_P50, TTFT, row.ttft), (ITL_P50, ITL, row.itl)):
                if m.name.startswith(prefix) and m.name[len(prefix):].isdigit():
                    into[int(m.name[len(prefix):])] = m.value
                elif only and m.name == pooled:
                    into[only] = m.value
    scored = [name for name in primary if v.metric(name) is not None and name not in row.accuracy]
    for name in scored:
        m = v.metric(name)
        row.accuracy[name], row.n[name] = m.value, m.n or 0
        ci = accuracy_interval(m)
        if ci:
            row.interval[name] = ci
        if part.has_baseline and (entry.label, name) in part.comparison.paired:
            row.delta[name] = part.comparison.paired[(entry.label, name)]
    if scored:
        row.status = v.status


def single_length(rd: RunDir) -> int | None:
    """The prompt length of a latency pass that timed one length only: its figures are the pooled
    `latency/<x>_p50`, with no `/ctx<N>` twin (evalsuite.tasks.latency), and the run's config names it."""
    latency = rd.read_config().get("latency") or {}
    lengths = latency.get("prompt_tokens") if isinstance(latency, dict) else None
    return lengths[0] if isinstance(lengths, list) and len(lengths) == 1 and isinstance(lengths[0], int) else None


def _judge(rows: dict[Key, Row], part: RunPart) -> None:
    """Verdicts and changed-answer shares of one folder's gate onto its rows."""
    by_label = {e.label: key_of(e) for e in part.comparison.entries}
    gate = part.gate
    for label in gate.controls:
        if by_label.get(label) in rows:
            rows[by_label[label]].control = True
    for label, verdict in gate.verdicts().items():
        row = rows.get(by_label.get(label))
        if row is None or label in gate.controls:
            continue
        row.verdict, row.failing = verdict, failed_checks_line(gate, label)
        row.accuracy_ok = gate.accuracy_verdict(label) == "passed"
        apart = next((c for c in gate.checks if c.candidate == label and c.status == "skip"
                      and c.detail.startswith(NOT_COMPARABLE)), None)
        row.not_comparable = f"{apart.metric} {apart.detail.split(' (see ')[0]}" if apart else ""
        for c in gate.checks:
            if c.candidate == label and c.unit == "pt" and c.changed is not None and c.n:
                row.changed.setdefault(c.metric, c.changed / c.n)


def _mark_pareto(report: Report) -> None:
    """Per primary metric, the variants the gate passed (and the baseline; passed_gate) no other of
    them beats on both weights GiB and accuracy: a failed variant's small weights are no trade-off
    on offer."""
    import pandas as pd

    for metric in report.primary:
        whole = [r for r in passed_gate(report) if r.weights_gib is not None and metric in r.accuracy]
        if not whole:
            continue
        sub = pd.DataFrame({"w": [r.weights_gib for r in whole], "a": [r.accuracy[metric] for r in whole]},
                           index=[r.name for r in whole])
        for name in front_labels(sub, "w", "a", set(), True):
            report.row(name).pareto.append(metric)


# ---------------------------------------------------------------- what to serve


@dataclass
class Pick:
    objective: str
    row: Row | None
    figure: str
    why: str


def longest_common(report: Report, rows: list[Row]) -> int | None:
    """The longest prompt length every timed row of `rows` was timed at."""
    timed = [set(r.ttft) for r in rows if r.ttft]
    common = set.intersection(*timed) if timed else set()
    return max(common) if common else None


def variant_of(r: Row) -> str:
    """The variant a row measures, whichever folder holds it: what a recommendation names."""
    return r.entry.result.variant if r.entry is not None else r.name


def _against(r: Row) -> str | None:
    """Why this row speaks against serving its variant: it did not run, the gate failed it, or a
    check of it compared nothing (no evidence that speed or capacity held)."""
    if r.baseline or r.control:
        return None
    if r.status not in USABLE_STATUSES:
        return f"{r.name} {r.status}"
    if r.verdict == "failed":
        return f"{r.name} failed"
    if r.not_comparable:
        return f"{r.name}'s {r.not_comparable}"
    own = r.timing.doubt() if r.timing is not None else None
    loaded = "timed on a loaded host" if r.ttft and r.host_load is not None and r.host_load.loaded else None
    return f"{r.name}'s latency not comparable: {own or loaded}" if own or loaded else None


def held_back(report: Report) -> dict[str, str]:
    """Per variant, the first row of it, in any folder read, that failed, did not run or compared
    nothing: a variant is one engine setting wherever it ran, and one such row holds every row of it
    back from the picks. The baseline's own row is the reference, never held back (keeping it
    changes nothing); a rerun of it that failed says its folder measured otherwise, and is shown."""
    out: dict[str, str] = {}
    for r in report.rows:
        if (why := _against(r)) is not None:
            out.setdefault(variant_of(r), why)
    return out


def passed_gate(report: Report) -> list[Row]:
    """The baseline and every variant the gate passed: every check shown within its limit (accuracy on
    evidence, memory and speed too) in every folder that judged it; usable, measured ones (controls
    measure noise and are never served). A variant too small to judge, one that failed any check in
    any folder, or one with a check that compared nothing (held_back) is no pick: a recommendation
    is a verdict too, and the page never recommends what its own table calls failed."""
    held = held_back(report)
    return [r for r in report.rows if r.status == "ok" and not r.control
            and (r.baseline or (r.accuracy_ok and r.verdict == "passed" and variant_of(r) not in held))]


HELD = "passed but held back"


def held_why(held: dict[str, str], names: list[str]) -> str:
    """Why these passed rows are no pick: the rows of their variants that speak against them."""
    return "; ".join(dict.fromkeys(held[n] for n in names))


def passed_but_held(report: Report) -> dict[str, str]:
    """Rows the gate passed whose variant another row holds back: row name -> that row's reason."""
    held = held_back(report)
    return {r.name: held[variant_of(r)] for r in report.rows
            if not r.baseline and not r.control and r.verdict == "passed" and variant_of(r) in held}


def picks(report: Report) -> list[Pick]:
    ok = passed_gate(report)
    out = [_best(ok, "least memory (weights)", lambda r: r.weights_gib, min, lambda r: f"{r.weights_gib:.2f} GiB")]
    out.append(_best(ok, "most KV capacity (tokens per GiB of KV cache)", lambda r: r.tokens_per_gib, max,
                     lambda r: f"{r.tokens_per_gib:,.0f} tokens/GiB"))
    alike = [r for r in ok if r.timed_apart is None]  # speed is ranked only among figures timed alike
    apart = [r.name for r in ok if r.ttft and r.timed_apart is not None]
    n = longest_common(report, alike)
    if n is not None:
        out.append(_best(alike, f"fastest first token at {n:,} prompt tokens", lambda r: r.ttft.get(n), min,
                         lambda r: f"TTFT p50 {r.ttft[n]:,.1f} ms" + loaded_mark(TTFT_P50, r.host_load), apart))
        out.append(_best(alike, f"fastest decode at {n:,} prompt tokens", lambda r: r.itl.get(n), min,
                         lambda r: f"ITL p50 {r.itl[n]:.2f} ms" + loaded_mark(ITL_P50, r.host_load), apart))
    elif apart:
        out.append(Pick("fastest", None, "-", f"none timed alike: {', '.join(apart)} timed otherwise (not comparable)"))
    return out


def _undecided_why(report: Report, names: list[str]) -> str:
    """Why these candidates' gate could not decide: too few items for a limit, or tasks at chance."""
    statuses = set()
    for part in report.parts:
        by_label = {e.label: e.result.variant for e in part.comparison.entries}
        statuses |= {c.status for c in (part.gate.checks if part.gate else [])
                     if c.unit == "pt" and by_label.get(c.candidate, c.candidate) in names}
    why = []
    if "warn" in statuses:
        why.append("too few items to show a drop within its limit (drop --limit, or run more items; "
                   "`evalsuite validate` says what each limit needs)")
    if "uninformative" in statuses:
        why.append("tasks at chance are no evidence")
    return "; ".join(why) or "no accuracy check shown within its limit"


def decision(report: Report) -> str:
    """The run's decision in one line: which candidates the gate passed, and where none did, why, so
    that picks of the baseline alone read as what they are."""
    cands = [r for r in report.rows if not r.baseline and not r.control]
    held = passed_but_held(report)
    by: dict[str, list[str]] = {}
    for r in cands:
        by.setdefault(HELD if r.name in held else r.verdict if r.status in USABLE_STATUSES and r.verdict else r.status,
                      []).append(r.name)
    passed = [r.name for r in passed_gate(report) if not r.baseline]
    if not cands:
        return f"only the baseline `{report.baseline}` was measured: nothing to choose between"
    why = {"inconclusive": lambda v: _undecided_why(report, v), HELD: lambda v: held_why(held, v)}
    said = [f"{len(v)} {k} ({', '.join(v)})" + (f": {why[k](v)}" if k in why else "")
            for k, v in by.items() if k != "passed"]
    if passed:
        return f"{len(passed)} of {len(cands)} candidates passed the gate ({', '.join(passed)})" + \
            (f"; {'; '.join(said)}" if said else "")
    return f"no candidate passed the gate, so every pick is the baseline `{report.baseline}`: {'; '.join(said)}"


def _best(rows: list[Row], objective: str, key, choose, show, apart: list[str] | None = None) -> Pick:
    have = [r for r in rows if key(r) is not None]
    if not have:
        return Pick(objective, None, "-", "no variant the gate passed (nor the baseline) measured it")
    best = choose(have, key=key)
    left = f"; {', '.join(apart)} timed otherwise, not compared" if apart else ""
    what = "the baseline and the variants the gate passed" + (", timed alike" if apart is not None else "")
    return Pick(objective, best, show(best), f"best of {len(have)}: {what}{left}")


NAME = re.compile(r"[^A-Za-z0-9_.-]")


def safe_name(text: str) -> str:
    """A file name for a plot of `text` (a task or metric name)."""
    return NAME.sub("_", text)


# ---------------------------------------------------------------- from the command line


def rules_file(given: Path | None, first: RunDir | None = None) -> Path:
    """--rules, else the rules the first run folder's config names (`gate_rules`), else the shipped ones."""
    if given is not None:
        return given
    return run_rules_path(first.read_config()) if first is not None else default_rules_path()
