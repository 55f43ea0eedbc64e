"""Commands that list variants fit the terminal: at 80 and 200 columns no line is wider, and every
variant's name shows in full (never `bf16_repe…`), each variant once."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from tests.mlflow_server import build_run

# names as long as the shipped examples' and the results pages' (34 characters)
LONG = "kv_fp8_skip_layers_0_1_triton_attn"
VARIANTS = {
    "bf16": {"needle": {1024: 1.0, 4096: 0.9}, "ttft": {1024: 80.0}, "itl": {1024: 17.8}},
    "bf16_repeat": {"wrong": range(2), "needle": {1024: 1.0, 4096: 0.9}, "ttft": {1024: 82.0}, "itl": {1024: 17.9}},
    "w4a16_sim": {"wrong": range(40), "weights_gib": 0.38, "needle": {1024: 0.5, 4096: 0.5},
                  "settings": {"quantize": "rtn"}, "build": {"simulated": True, "method": "rtn"}},
    "kv_fp8": {"wrong": range(20), "kv_cache_tokens": 20000, "needle": {1024: 0.9, 4096: 0.8},
               "ttft": {1024: 87.0}, "itl": {1024: 17.8}},
    LONG: {"wrong": range(5), "kv_cache_tokens": 18000, "needle": {1024: 1.0, 4096: 0.9},
           "ttft": {1024: 90.0}, "itl": {1024: 18.0}},
    "int4_awq": {"status": "skipped", "reason": "no W4A16 kernel on this CPU (AVX2 only)"},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_run(tmp_path_factory.mktemp("wide"), "20250101-000000-terminal", VARIANTS, baseline="bf16")


def shown(args: list[str], columns: int) -> str:
    res = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
    assert res.exit_code in (0, 1), res.output
    return res.stdout


def lines_fit(text: str, columns: int) -> None:
    longest = max(text.splitlines(), key=len)
    assert len(longest) <= columns, f"{len(longest)} > {columns}: {longest!r}"


def names_once(text: str, names) -> None:
    """Each name whole and once: as a column's head, a row's first cell or a block's title (`vs bf16`,
    naming the baseline a verdict was taken against, does not count)."""
    for name in names:
        found = re.findall(rf"(?<![\w.-])(?<!vs ){re.escape(name)}(?![\w-])", text)
        assert len(found) == 1, (name, len(found), text)


@pytest.mark.parametrize("columns", [80, 200])
def test_compare_fits_and_shows_each_variant_once(run, columns):
    text = shown(["compare", str(run)], columns)
    lines_fit(text, columns)
    names_once(text, VARIANTS)
    assert "[paired 95%]" in text or "[low, high]" in text
    assert "no W4A16 kernel on this CPU" in text or columns == 200


def test_compare_at_80_columns_is_a_block_per_variant_at_200_a_table(run):
    narrow, wide = shown(["compare", str(run)], 80), shown(["compare", str(run)], 200)
    assert "┃" not in narrow and re.search(r"^kv_fp8  ok$", narrow, re.M)
    assert len(narrow.splitlines()) < 90  # the demo's 4 variants printed 206 lines over 3 tables
    assert "┃ metric" in wide


@pytest.mark.parametrize("columns", [80, 200])
def test_run_summary_fits_and_never_folds_a_header(run, columns):
    import io

    from rich.console import Console

    from evalsuite.core.rundir import RunDir
    from evalsuite.report.summary import print_summary

    console = Console(width=columns, record=True, file=io.StringIO())
    print_summary(RunDir(run).load_run(), console, run_dir=RunDir(run))
    text = console.export_text()
    lines_fit(text, columns)
    names_once(text.split("accuracy: value")[0], VARIANTS)  # the notes below name variants again, with a reason
    # a header is never folded to its last letters ("c" of legal/balanced_acc)
    assert not re.search(r"^[┃│ ]*\w{1,2}[ ]*[┃│]", text, re.M), text
    assert "mmlu/acc" in text and "TTFT p50 ms @1,024" in text


@pytest.mark.parametrize("columns", [80, 200])
def test_plan_of_a_config_never_cuts_a_name(tmp_path, columns):
    from tests.test_examples import SHAPES

    config = tmp_path / "c.yaml"
    config.write_text(f"model: {{path: {SHAPES / 'qwen2.5-7b.json'}}}\nvariants:\n  bf16: {{}}\n  bf16_repeat: {{}}\n"
                      f"  {LONG}: {{kv_cache_dtype: fp8, engine_args: {{kv_cache_dtype_skip_layers: ['0', '1']}}}}\n"
                      "  kv_int8_per_token_head: {kv_cache_dtype: int8_per_token_head}\n"
                      "defaults: {max_model_len: 32768}\n")
    text = shown(["plan", str(config), "--gpu", "H100-SXM"], columns)
    lines_fit(text, columns)
    names_once(text, ["bf16", "bf16_repeat", LONG, "kv_int8_per_token_head"])
    assert "…" not in text


def test_plan_that_does_not_fit_says_so_and_exits_1(tmp_path):
    from tests.test_examples import SHAPES

    res = CliRunner().invoke(app, ["plan", str(SHAPES / "llama-2-7b.json"), "--max-model-len", "131072"])
    assert res.exit_code == 1
    assert "does not fit: max_model_len 131,072 is above the model's 4,096" in res.stdout
    res = CliRunner().invoke(app, ["plan", str(SHAPES / "llama-2-7b.json"), "--max-model-len", "131072",
                                   "--format", "json"])
    assert res.exit_code == 1 and json.loads(res.stdout)["fits"] is False


@pytest.mark.parametrize("columns", [80, 200])
def test_aligned_lines_keep_names_whole_and_wrap_the_last_column(columns):
    """The helper a one-line-per-record output (gate's candidates) prints with."""
    import io

    from rich.console import Console

    from evalsuite.report.terminal import aligned

    why = "mmlu/acc dropped 7.0 pt [6.3, 7.8] (two-sided 95%), limit 2 pt; needle/acc dropped 81.3 pt, limit 5 pt"
    console = Console(width=columns, record=True, file=io.StringIO())
    console.print(aligned([[LONG, "FAILED", why], ["bf16_repeat", "passed", "every check within its limit"]]))
    text = console.export_text()
    lines_fit(text, columns)
    assert LONG in text and "bf16_repeat" in text and text.index("FAILED") == text.splitlines()[0].index("FAILED")
    assert (len(text.splitlines()) == 2) == (columns == 200)  # at 80 the reason wraps under itself
