"""The gate where a plausible candidate used to break it or slip through: a stratum whose every item
changed the same way, a task that declares no chance level, a drop shown beyond the limit on too
few items, a control's own failure, the noise band, latency timed on a loaded host, and a failed
row that names its check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.cli.main import app
from tests.mlflow_server import build_run

DEFAULT_RULES = Path(__file__).resolve().parent.parent / "configs" / "gates" / "default.yaml"
runner = CliRunner()


def gate(*args: str):
    """The gate's full Markdown report (its terminal view: tests/test_gate_terminal.py)."""
    return runner.invoke(app, ["gate", *args, "--format", "markdown"])


def rules_file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def legal_run(tmp_path: Path, run_id: str, answers: dict[str, list[str]], *, declared: bool = True,
              logprobs: bool = True, targets: bool = True, controls: list[str] | None = None) -> Path:
    """CUAD-like clause groups (`non_compete` and `governing_law`, 40 items each, Yes on every
    fourth), each variant's answers given per item in that order; `declared`: the record states its
    chance level as a run does; `logprobs`/`targets`: what the scores kept (older records: neither)."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import RunRecord, Score, VariantResult
    from evalsuite.tasks.balanced import balanced_metrics

    items = [(g, "Yes" if i % 4 == 0 else "No") for g in ("non_compete", "governing_law") for i in range(40)]
    rd = RunDir(tmp_path / run_id)
    rd.write_config({"baseline": "bf16", "controls": controls or []})
    record = RunRecord(run_id=run_id, model="tiny")
    for name, preds in answers.items():
        scores = [Score(sample_id=f"{g}/{i}", task="legal", value=float(p == t), pred=p, target=t if targets else "",
                        group=g, extra={"logprobs": {"Yes": -0.1, "No": -2.0}} if logprobs else {})
                  for i, ((g, t), p) in enumerate(zip(items, preds, strict=True))]
        rd.append_samples(name, "legal", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                          for s in scores])
        result = VariantResult(variant=name, status="ok", metrics=balanced_metrics(scores, "legal"),
                               primary_metrics=["legal/balanced_acc"], chance={"legal/balanced_acc": 0.5} if declared else {})
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    return rd.root


def right(n_wrong: int = 0) -> list[str]:
    """Answers right on every item but the first `n_wrong` of each group."""
    items = [(g, "Yes" if i % 4 == 0 else "No") for g in range(2) for i in range(40)]
    return [t if i % 40 >= n_wrong else ("No" if t == "Yes" else "Yes") for i, (_, t) in enumerate(items)]


def test_a_candidate_saying_no_to_a_whole_clause_group_is_judged_not_crashed(tmp_path):
    """Every item of `non_compete` answered "No": that group's Yes items all lost, its No items all
    kept, so every item of a stratum changed the same way. Tango's bound for such a stratum came back
    as (-1, 1) and the p-value search raised: a traceback and exit 1, read as "failed"."""
    base = right()
    cand = ["No"] * 40 + base[40:]
    run = legal_run(tmp_path, "20250101-000000-l", {"bf16": base, "nope": cand})
    md = tmp_path / "gate.md"
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:nope", "--rules", str(DEFAULT_RULES),
               "--markdown", str(md))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    row = next(ln for ln in md.read_text().splitlines() if "`legal/balanced_acc`" in ln)
    # recall on Yes in non_compete went from 1 to 0: a quarter of the headline, 25 points
    assert "| +25.00 pt |" in row and row.startswith("| ❌ |"), row
    assert res.exit_code == 1, res.output
    everything = legal_run(tmp_path, "20250101-000001-l", {"bf16": base, "nope": ["No"] * 80})
    res = gate("--baseline", f"{everything}:bf16", "--candidate", f"{everything}:nope", "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1 and "`legal/balanced_acc`" in res.output, res.output


def test_a_bug_while_judging_is_never_exit_1(tmp_path, monkeypatch):
    """Exit 1 means "failed"; an error of the gate's own is exit 70 and one line, whatever it is."""
    from evalsuite.verdict import checks as gate_mod

    run = legal_run(tmp_path, "20250101-000000-b", {"bf16": right(), "same": right()})

    def broken(*a, **k):
        raise ValueError("f(a) and f(b) must have different signs")

    monkeypatch.setattr(gate_mod, "paired_result", broken)
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:same", "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 70, res.output
    assert "bug in evalsuite, not a verdict" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(("declared", "logprobs"), [(False, False), (True, True)])
def test_chance_comes_from_the_targets_where_no_level_is_declared(tmp_path, declared, logprobs):
    """An older record (no `chance`, no log-probabilities) of a model that answers No to almost
    everything: its balanced accuracy 0.525 sits within 2 points of 1/2, its plain accuracy 0.76 within
    2 of the majority label's 0.75. Both were judged informative; an identical candidate passed."""
    base = right()
    base = ["No" if t == "Yes" and i % 40 else t for i, t in enumerate(base)]  # one Yes kept a group
    run = legal_run(tmp_path, "20250101-000000-c", {"bf16": base, "same": list(base)}, declared=declared,
                    logprobs=logprobs)
    rules = rules_file(tmp_path, {"rules": [{"metrics": ["legal/balanced_acc", "legal/acc"], "max_drop_points": 2}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:same", "--rules", str(rules))
    assert res.exit_code == 3, res.output
    for metric in ("legal/balanced_acc", "legal/acc"):
        row = next(ln for ln in res.output.splitlines() if f"`{metric}`" in ln and ln.startswith("| ❔"))
        assert "(at chance)" in row and "uninformative" in row, row


def test_where_nothing_says_the_chance_level_it_is_unknown_never_informative(tmp_path):
    run = legal_run(tmp_path, "20250101-000000-u", {"bf16": right(10), "same": right(10)}, declared=False,
                    logprobs=False, targets=False)
    rules = rules_file(tmp_path, {"rules": [{"metrics": ["legal/acc"], "max_drop_points": 2}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:same", "--rules", str(rules))
    row = next(ln for ln in res.output.splitlines() if "`legal/acc`" in ln and ln.startswith("| ❔"))
    assert "(chance unknown)" in row and "nothing says what an answer that ignores the item scores" in row
    assert res.exit_code == 3, res.output


@pytest.mark.parametrize("insufficient", ["warn", "pass"])
def test_losing_every_one_of_few_items_fails_at_any_n(tmp_path, insufficient):
    """8 of 8 items lost: fewer than min_n, and the limit unresolvable at n=8, but the exact p of a
    drop at most 2 points is 0.005: shown beyond the limit, which fails whatever `insufficient_n` says."""
    base = build_run(tmp_path / "runs", "20250101-000000-base", {"bf16": {}}, n=8)
    cand = build_run(tmp_path / "runs", "20250101-000001-cand", {"fp8": {"wrong": range(8)}}, n=8)
    rules = rules_file(tmp_path, {"insufficient_n": insufficient, "rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert res.exit_code == 1, res.output
    row = next(ln for ln in res.output.splitlines() if "`mmlu/acc`" in ln and ln.startswith("| ❌"))
    assert "insufficient n: n=8 paired items < min_n 10; but the drop is shown to exceed the limit" in row


def test_a_collapse_between_runs_that_share_no_items_fails(tmp_path):
    """No sample id in common: the counts still compare as two samples of the task (Newcombe's
    interval), and 200 of 200 right against 20 of 200 is shown beyond any limit."""
    a = build_run(tmp_path / "a", "20250101-000000-a", {"bf16": {}})
    b = build_run(tmp_path / "b", "20250101-000000-b", {"fp8": {"wrong": range(20, 200)}})
    for f in (Path(b) / "fp8" / "samples").glob("*.jsonl"):
        f.write_text(f.read_text().replace('"q', '"other-q'))
    rules = rules_file(tmp_path, {"insufficient_n": "pass", "rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    res = gate("--baseline", f"{a}:bf16", "--candidate", f"{b}:fp8", "--rules", str(rules))
    assert res.exit_code == 1, res.output
    assert "the runs scored different items (200 and 200, no sample id in common)" in res.output
    assert "but the drop is shown to exceed the limit" in res.output


def test_a_collapse_on_a_small_stratum_fails(tmp_path):
    """A macro accuracy over a subject of 3 items (under min_stratum_n 5) and one of 40: losing every
    item of both is shown beyond the limit, small stratum or not."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import RunRecord, Score, VariantResult
    from evalsuite.stats.metrics import by_group, macro_accuracy

    rd = RunDir(tmp_path / "20250101-000000-s")
    rd.write_config({"baseline": "bf16"})
    record = RunRecord(run_id="20250101-000000-s", model="tiny")
    for name, value in (("bf16", 1.0), ("lost", 0.0)):
        scores = [Score(sample_id=f"{g}{i}", task="mmlu", value=value, pred="A", target="ABCD"[i % 4], group=g)
                  for g, n in (("law", 3), ("math", 40)) for i in range(n)]
        rd.append_samples(name, "mmlu", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                         for s in scores])
        result = VariantResult(variant=name, status="ok", metrics=[macro_accuracy(by_group(scores), "mmlu/acc_macro")],
                               chance={"mmlu/acc_macro": 0.25})
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    rules = rules_file(tmp_path, {"insufficient_n": "pass", "rules": [{"metrics": "mmlu/acc_macro", "max_drop_points": 2,
                                                                        "strata": "group"}]})
    res = gate("--baseline", f"{rd.root}:bf16", "--candidate", f"{rd.root}:lost", "--rules", str(rules))
    assert res.exit_code == 1, res.output
    assert "a stratum has 3 item(s) < min_stratum_n 5; but the drop is shown to exceed the limit" in res.output


def test_a_control_never_sets_the_exit_code(tmp_path):
    """The control (a baseline rerun) lost 40 of 80 answers; the candidate kept every one. The control
    is a noise reference: its row says so, and the gate passes on the candidate's evidence."""
    base = right()
    lost = right(20)
    run = legal_run(tmp_path, "20250101-000000-n", {"bf16": base, "bf16_repeat": lost, "fp8": list(base)},
                    controls=["bf16_repeat"])
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 5}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:fp8", "--rules", str(rules))
    assert "| `bf16_repeat` (control) | ℹ️ noise reference |" in res.output
    assert res.exit_code == 0, res.output
    assert "evalsuite gate passed: 1 passed (1 control(s): noise references, not counted)" in res.output


def test_a_control_that_changed_nothing_sets_no_noise_band(tmp_path):
    """A rerun that changed no answer bounds its drop only by the small-n floor (+-3.7 points at 80
    items), which measures the n, not the engine's noise: a candidate's 2 lost answers (2.5 points) are
    not called noise. One that changed answers gives its 90% interval (two one-sided 95% bounds)."""
    base = right()
    cand = right(1)  # one lost in each group
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 20}]})
    quiet = legal_run(tmp_path, "20250101-000000-q", {"bf16": base, "bf16_repeat": list(base), "fp8": cand},
                      controls=["bf16_repeat"])
    res = gate("--baseline", f"{quiet}:bf16", "--candidate", f"{quiet}:fp8", "--rules", str(rules))
    assert "interval of the same drop" not in res.output, res.output
    noisy_rerun = base[:1] + ["Yes" if a == "No" else "No" for a in base[1:4]] + base[4:]
    noisy = legal_run(tmp_path, "20250101-000001-q", {"bf16": base, "bf16_repeat": noisy_rerun, "fp8": cand},
                      controls=["bf16_repeat"])
    res = gate("--baseline", f"{noisy}:bf16", "--candidate", f"{noisy}:fp8", "--rules", str(rules))
    row = next(ln for ln in res.output.splitlines() if ln.startswith("| ✅ | `fp8` |"))
    assert "inside control `bf16_repeat`'s 90% interval of the same drop" in row, row


def test_every_failed_row_names_its_failing_check(tmp_path):
    """The run summary's gate column and the report page say which check failed a variant, not only
    that it failed."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.verdict.gate import failed_checks_line, run_gate
    from evalsuite.verdict.sides import Side
    from evalsuite.verdict.rules import load_rules
    from evalsuite.report.summary import gate_verdicts

    run = build_run(tmp_path / "runs", "20250101-000000-f", {"bf16": {}, "fp8": {"wrong": range(40)}}, baseline="bf16")
    rd = RunDir(run)
    verdicts, _ = gate_verdicts(rd, rd.load_run(), load_rules(DEFAULT_RULES))
    assert verdicts["fp8"] == "failed vs bf16: mmlu/acc dropped 20.0 pt (beyond the limit 2 pt)"
    report = run_gate(Side(rd, "bf16"), [Side(rd)], load_rules(DEFAULT_RULES), str(DEFAULT_RULES))
    assert failed_checks_line(report, "fp8") == "mmlu/acc dropped 20.0 pt (beyond the limit 2 pt)"
