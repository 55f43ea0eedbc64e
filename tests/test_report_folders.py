"""`evalsuite report` over several run folders: every variant of every folder is set against the one
baseline, paired on the items both answered as `gate` pairs them, so a variant's verdict does not
depend on whether it was run beside the baseline or alone into a folder of its own (`-V`, another day).
Built with `evalsuite import` from the tests' sample of the Qwen2.5-Coder-1.5B H200 page's kept
per-item scores (MMLU's 14,042 items, the 30 CUAD tasks, 150 needles) of bf16, fp8 and kv_fp8."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.report.page import build
from evalsuite.verdict.rules import default_rules_path, load_rules
from tests.results_pages import SAMPLE

VARIANTS = ["bf16", "fp8", "kv_fp8"]  # the variants of the tests' sample of that page's data


def kept_run(kept: Path, variants: list[str], out: Path) -> Path:
    """`evalsuite import KEPT OUT -V ...`: a run folder of `variants` from the kept scores."""
    res = CliRunner().invoke(app, ["import", str(kept), str(out), *(a for v in variants for a in ("-V", v))])
    assert res.exit_code == 0, res.output
    return out


def _verdicts(folders: list[Path], baseline: str) -> dict[str, tuple[str | None, dict[str, str]]]:
    from evalsuite.core.rundir import RunDir

    rules = load_rules(default_rules_path())
    report = build([(RunDir(f), None) for f in folders], baseline, rules, str(default_rules_path()))
    return {r.name: (r.verdict, {m: f"{d.delta:+.2f} [{d.low:+.2f}, {d.high:+.2f}] n={d.n}" for m, d in r.delta.items()})
            for r in report.rows}


def test_one_variant_per_folder_gets_the_verdicts_of_one_folder(tmp_path, results_pages):
    from evalsuite.results import page_data

    kept = page_data(SAMPLE, results_pages) / "scores"
    together = kept_run(kept, VARIANTS, tmp_path / "20261201-000000-all")
    split = [kept_run(kept, [v], tmp_path / f"20261201-00000{i + 1}-{v}") for i, v in enumerate(VARIANTS)]
    one = _verdicts([together], "bf16")
    # the baseline's folder given last, and named as RUN:NAME: each other folder is set against it
    apart = _verdicts([*split[1:], split[0]], f"{split[0]}:bf16")
    assert apart == one
    assert {v: one[v][0] for v in VARIANTS[1:]} == {"fp8": "passed", "kv_fp8": "failed"}, one
    assert set(one["kv_fp8"][1]) >= {"mmlu/acc", "legal/balanced_acc", "needle/acc"}
    # without RUN:NAME the first folder that holds the baseline is the one
    assert _verdicts(split, "bf16") == one
