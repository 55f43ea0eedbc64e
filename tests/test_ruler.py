"""The ruler task type: RULER's eleven synthetic tasks from lm-eval 0.4.13's generators, offline.

The reference check runs lm-eval's own task functions (niah_utils.niah_single_1 ..., vt's, cwe's and
fwe's get-dataset functions), with the same offline seams, under the same seed, and compares items
field by field. Its tokenizer is a word-level one built here (a common tokenizer's verbosity, so
that lm-eval's 500 items per length stay quick and its vt example fits its 500 tokens); the tiny
test model's byte-level tokenizer, three tokens a word, drives the task and the real-engine test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion, Score
from evalsuite.run.config import RunConfig, load_config
from evalsuite.tasks import TaskContext
from evalsuite.tasks.ruler import ALL_TASKS, RulerConfig
from evalsuite.tasks.ruler_data import ONE_ANSWER

pytest.importorskip("lm_eval")
pytest.importorskip("wonderwords")

REPO = Path(__file__).resolve().parents[1]
REFERENCE_LENGTH = 1024


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory) -> Path:
    """A saved word-level tokenizer (every word and punctuation mark one token), loadable by path."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "[BOS]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path_factory.mktemp("word-tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="[BOS]").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def essays():
    from evalsuite.data.assets import paul_graham_dir
    from evalsuite.tasks import ruler_data

    return ruler_data.essay_words(paul_graham_dir())


def lm_eval_items(task: str, tokenizer: Path, length: int, essays: list[str], seed: int) -> list[dict]:
    """lm-eval's own RULER function for `task` (500 items a length), as its YAML's custom_dataset calls it."""
    from evalsuite.tasks import ruler_data as rd
    from lm_eval.tasks.ruler import cwe_utils, fwe_utils, niah_utils, vt_utils

    functions = {**{t: getattr(niah_utils, t) for t in rd.NIAH}, "vt": vt_utils.get_vt_dataset,
                 "cwe": cwe_utils.get_cw_dataset, "fwe": fwe_utils.fwe_download}
    with rd.offline(essays), rd.seeded(seed):
        rd.reset_cwe_rng(cwe_utils)  # the state a fresh process has
        return list(functions[task](tokenizer=str(tokenizer), max_seq_lengths=[length])["test"])


@pytest.mark.parametrize("task", ALL_TASKS)
def test_items_are_lm_evals_item_for_item(task, word_tokenizer, essays):
    from transformers import AutoTokenizer

    from evalsuite.tasks import ruler_data as rd

    tok = AutoTokenizer.from_pretrained(word_tokenizer)
    seed = rd.item_seed(0, task, REFERENCE_LENGTH)
    ours = rd.generate(task, REFERENCE_LENGTH, 4, tok, essays, seed)
    theirs = lm_eval_items(task, word_tokenizer, REFERENCE_LENGTH, essays, seed)[:4]
    fields = ("input", "outputs", "gen_prefix", "length", "max_length")
    assert len(ours) == 4 and [{k: d[k] for k in fields} for d in ours] == [{k: d[k] for k in fields} for d in theirs]
    # fwe sizes its text to the length and adds its answer budget on top, as lm-eval does
    assert all(d["outputs"] and REFERENCE_LENGTH / 2 < d["length"] <= REFERENCE_LENGTH + 50 for d in ours)
    assert len({d["input"] for d in ours}) == 4  # four different items, not one repeated


def test_cwe_rng_reset_is_the_state_after_import():
    import random

    from evalsuite.tasks import ruler_data as rd

    cwe = rd.modules()["cwe"]
    rng = random.Random(42)
    words = sorted({w for x in ["noun", "adjective", "verb"] for w in cwe.r._categories[x]})
    rng.shuffle(words)
    assert words == cwe.WORDS  # the import's one draw: rebuilding it reaches the import's state
    rd.reset_cwe_rng(cwe)
    assert cwe.RNG.getstate() == rng.getstate()


def test_seeds_differ_by_task_and_length_and_leave_global_state_alone():
    import random

    from evalsuite.tasks import ruler_data as rd

    seeds = {rd.item_seed(0, t, n) for t in ALL_TASKS for n in (4096, 8192)}
    assert len(seeds) == 2 * len(ALL_TASKS) and rd.item_seed(0, "vt", 4096) == rd.item_seed(0, "vt", 4096)
    random.seed(7)
    before = random.random()
    random.seed(7)
    with rd.seeded(123):
        random.random()
    assert random.random() == before


def test_score_is_lm_evals_string_match_all():
    from evalsuite.tasks.ruler_data import string_match_all

    assert string_match_all(" 1234567.", ["1234567"]) == 1.0
    assert string_match_all("AIUML and nnypl", ["AIUML", "NNYPL", "DVFAU", "XIMAX"]) == 0.5
    assert string_match_all("\x00nothing", ["42"]) == 0.0


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def built(tiny_tokenizer, tmp_path_factory):
    """Every task at 3072 tokens, two items each, through the tiny model's chat template."""
    ctx = TaskContext(base_dir=REPO, cache_dir=tmp_path_factory.mktemp("cache"), tokenizer=tiny_tokenizer,
                      max_model_len=4096)
    task = RulerConfig(lengths=[3072], n=2).build(ctx)
    return task, task.samples()


def test_samples_ids_groups_and_budgets(built, tiny_tokenizer):
    task, samples = built
    assert len(samples) == 2 * len(ALL_TASKS)
    assert samples[0].id == "ruler-niah_single_1-len3072-0" and samples[0].group == "niah_single_1_len3072"
    assert len({s.id for s in samples}) == len(samples)
    for s in samples:
        assert len(s.request.prompt_token_ids) + s.request.max_tokens <= 4096
        assert s.meta["answers"] and 0 <= s.meta["depth"] <= 1
    text = tiny_tokenizer.decode(samples[0].request.prompt_token_ids)
    assert text.rstrip().endswith("mentioned in the provided text is")  # lm-eval's gen_prefix opens the answer
    assert samples[0].request.max_tokens == 128 and samples[-1].request.max_tokens == 50  # niah, fwe


def test_metrics_named_as_ruler_and_paired_on_the_right_items(built):
    from evalsuite.tracking.store import sanitize
    from evalsuite.stats.paired import covers, item_labels, item_length

    task, samples = built
    scores = [task.score(s, Completion(text=s.meta["answers"][0] if i % 2 else "no idea"))
              for i, s in enumerate(samples)]
    metrics = {m.name: m for m in task.metrics(scores)}
    assert metrics["ruler/score/len3072"].n == len(samples) and metrics["ruler/score/len3072"].stderr
    assert metrics["ruler/score/len3072"].length == 3072 and metrics["ruler/score/vt_len3072"].length is None
    cell = metrics["ruler/score/niah_single_1_len3072"]
    assert cell.n == 2 and cell.value == 0.5
    assert metrics["ruler/score/niah_multivalue_len3072"].value == pytest.approx(0.125)  # 1 of 4 values, once
    assert metrics["ruler/score/vt"].n == 2 and "ruler/score" in metrics
    for name, m in metrics.items():
        # a task whose items expect one string scores each 0 or 1: a proportion (Wilson's interval);
        # the pooled scores and the tasks that expect several strings give partial credit: a mean
        one = any(name.startswith(f"ruler/score/{t}") for t in ONE_ANSWER)
        assert sanitize(name) == name and m.item_score and m.kind == ("proportion" if one else "mean"), name
    assert {s.meta["ruler_task"] for s in samples if len(s.meta["answers"]) == 1} == set(ONE_ANSWER)
    # the paired test takes a length's items by their recorded length, a task's by their labels
    rows = [(s.model_dump(), sc.model_dump()) for s, sc in zip(samples, scores)]
    for label, expected in (("len3072", len(samples)), ("niah_single_1", 2), ("niah_single_1_len3072", 2),
                            ("vt_len3072", 2), ("niah_multikey_1", 2)):
        metric = metrics[f"ruler/score/{label}"]
        assert sum(covers(metric, item_labels(s, sc), item_length(s, sc)) for s, sc in rows) == expected, label


def test_items_are_kept_and_served_from_the_cache(built, tiny_tokenizer, monkeypatch):
    from evalsuite.tasks import ruler_data

    task, samples = built
    monkeypatch.setattr(ruler_data, "generate", lambda *a, **k: pytest.fail("generated again"))
    fewer = RulerConfig(lengths=[3072], n=1, tasks=["vt", "niah_single_2"]).build(task.ctx).samples()
    kept = {s.id: s.model_dump() for s in samples if s.meta["index"] == 0}
    assert [s.id for s in fewer] == ["ruler-vt-len3072-0", "ruler-niah_single_2-len3072-0"]
    assert all(s.model_dump() == kept[s.id] for s in fewer)


def test_limit_builds_no_more_items_than_it_keeps_and_they_are_a_full_runs(built):
    """`--limit` on a config whose RULER task holds 28 items a task and length (the shipped examples'):
    building hundreds of 128K items to keep ten would cost CPU minutes before a quick try starts."""
    from evalsuite.run.session import narrowed

    def ruler_n(limit, lengths=(65536, 131072), n=28):
        cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                        "tasks": [{"type": "ruler", "lengths": list(lengths), "n": n}]})
        return narrowed(cfg, [], limit).tasks[0].n

    assert (ruler_n(10), ruler_n(23), ruler_n(10_000), ruler_n(None)) == (1, 2, 28, 28)
    task, samples = built
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                    "tasks": [{"type": "ruler", "lengths": [3072], "n": 2}]})
    limited = narrowed(cfg, [], len(ALL_TASKS)).tasks[0]
    assert limited.n == 1
    full = {s.id: s.model_dump() for s in samples}
    assert all(s.model_dump() == full[s.id] for s in limited.build(task.ctx).samples())


def test_missing_items_are_built_in_parallel_in_order(monkeypatch):
    from evalsuite.tasks import ruler

    monkeypatch.setattr(ruler.os, "cpu_count", lambda: 4)
    assert ruler.run_all(pow, [(2, 3), (3, 2), (4, 2)]) == [8, 9, 16]  # three spawned workers
    monkeypatch.setattr(ruler.os, "cpu_count", lambda: 2)
    assert ruler.run_all(pow, [(2, 3), (3, 2)]) == [8, 9]


def test_config_errors_are_one_line():
    with pytest.raises(ValueError, match="niah_single_9"):
        RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                  "tasks": [{"type": "ruler", "tasks": ["niah_single_9"]}]})
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                    "tasks": [{"type": "ruler", "lengths": [4096, 8192], "n": 50}]})
    assert cfg.tasks[0].tasks == ALL_TASKS and cfg.tasks[0].n == 50


def test_a_base_model_without_a_chat_template_is_told_to_set_chat_false(word_tokenizer, tmp_path):
    """The GPU starter's RULER task with `init --model` naming a base model: one line, before any engine."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(word_tokenizer)
    ctx = TaskContext(base_dir=REPO, cache_dir=tmp_path, tokenizer=tok, max_model_len=4096)
    item = {"input": "What is the value of X ?", "gen_prefix": "Answer :"}
    with pytest.raises(ConfigError, match="chat: true but the tokenizer has no chat template; set chat: false"):
        RulerConfig().build(ctx).prompt_ids("vt", item, " ")
    assert RulerConfig(chat=False).build(ctx).prompt_ids("vt", item, " ")


def test_too_long_for_the_window_and_too_short_for_a_task(tiny_tokenizer, tmp_path):
    ctx = TaskContext(base_dir=REPO, cache_dir=tmp_path, tokenizer=tiny_tokenizer, max_model_len=4096)
    with pytest.raises(ConfigError, match="exceed max_model_len 4096"):
        RulerConfig(lengths=[8192]).build(ctx).samples()
    with pytest.raises(ConfigError, match="cwe does not fit 1 items in 4096 tokens"):  # three tokens a word
        RulerConfig(lengths=[4096], tasks=["cwe"], n=1).build(ctx).samples()


def test_a_length_without_room_for_a_task_makes_no_items(tiny_tokenizer, essays):
    """Where a task's template, needles and answer budget leave no room, lm-eval's needle generator
    raises and its cwe generator retries forever; either makes no items, which the task names."""
    from evalsuite.tasks import ruler_data as rd

    for task in ("niah_multikey_3", "cwe"):
        assert rd.generate(task, 150, 1, tiny_tokenizer, essays, 0) == [], task


def test_shipped_configs_validate():
    cpu = load_config(REPO / "configs" / "ruler-cpu.yaml")
    (ruler,) = [t for t in cpu.tasks if t.type == "ruler"]
    assert ruler.tasks == ALL_TASKS
    lengths, variants = [], {}
    for name in ("qwen-1.5b-ruler.yaml", "qwen-1.5b-ruler-64k.yaml", "qwen-1.5b-ruler-128k.yaml"):
        h200 = load_config(REPO / "lab" / "configs" / "h200" / name)
        (ruler,) = [t for t in h200.tasks if t.type == "ruler"]
        assert ruler.tasks == ALL_TASKS and len(ruler.tasks) * ruler.n >= 124  # gate --plan: 5 pt on the average
        lengths += ruler.lengths
        variants[name] = set(h200.variants)
        assert h200.defaults.max_model_len == max(ruler.lengths)
    assert lengths == [4096, 8192, 16384, 32768, 65536, 131072]
    six = {"bf16", "fp8", "awq", "kv_fp8", "kv_fp8_skip_layers_0_1", "kv_int8_per_token_head"}
    assert all(v == six for v in variants.values()), variants  # the variants at every length


@pytest.mark.engine
def test_ruler_cpu_config_runs_on_vllm(tmp_path, tiny_model):
    """configs/ruler-cpu.yaml with the tiny model: every task recorded under two variants, the same ids."""
    import yaml

    from evalsuite.core.configfile import load_raw

    raw = load_raw(REPO / "configs" / "ruler-cpu.yaml")
    raw.update(model={"path": str(tiny_model)}, output_dir=str(tmp_path / "runs"), tracking={"enabled": False})
    raw["defaults"].update(enforce_eager=True, max_num_batched_tokens=4096)
    raw["variants"] = {"bf16": {}, "fp32": {"dtype": "float32"}}  # both run on any CPU
    path = tmp_path / "ruler.yaml"
    path.write_text(yaml.safe_dump(raw))
    # the engine's part: every task once, through --limit, which then builds one item a task
    res = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(path), "--no-progress",
                          "--limit", str(len(ALL_TASKS))], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    ids = {}
    for v in json.loads((run / "run.json").read_text())["variants"]:
        assert v["status"] == "ok", v.get("reason")
        metrics = {m["name"]: m for m in v["metrics"]}
        length = raw["tasks"][0]["lengths"][0]
        assert metrics[f"ruler/score/len{length}"]["n"] == len(ALL_TASKS) * 1
        assert all(f"ruler/score/{t}_len{length}" in metrics for t in ALL_TASKS)
        rows = [json.loads(x) for x in (run / v["variant"] / "samples" / "ruler.jsonl").read_text().splitlines()]
        ids[v["variant"]] = [r["sample"]["id"] for r in rows]
        assert all(0 <= Score.model_validate(r["score"]).value <= 1 for r in rows)
    assert sorted(ids["bf16"]) == sorted(ids["fp32"]) and len(ids["bf16"]) == len(set(ids["bf16"]))
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert raw["tasks"][0]["n"] > 1 and recorded["tasks"][0]["n"] == 1 and recorded["limit"] == len(ALL_TASKS)


def test_the_shipped_examples_run_ruler_from_4k_to_128k_with_a_verdicts_n():
    """A model of the user's own: the 32K example runs RULER's eleven tasks at 4K-32K and the harder
    contract questions, its 128K sibling 64K and 128K, with the n that the changed-answer rates
    measured on the 1.5B ask for a 5-point verdict a length (docs/tasks-ruler.md: 28 a task)."""
    examples = REPO / "evalsuite" / "configs" / "examples"
    for model in ("qwen2.5-7b-instruct", "llama-3.1-8b-instruct"):
        lengths = []
        for path in (examples / f"{model}.yaml", examples / f"{model}-128k.yaml"):
            cfg = load_config(path)
            (ruler,) = [t for t in cfg.tasks if t.type == "ruler"]
            assert ruler.tasks == ALL_TASKS and ruler.n >= 28 and ruler.chat, path.name
            assert max(ruler.lengths) <= min(v.max_model_len for v in cfg.variants.values()), path.name
            lengths += ruler.lengths
        assert sorted(lengths) == [4096, 8192, 16384, 32768, 65536, 131072], model
        assert any(t.type == "legal_long_multi" for t in load_config(examples / f"{model}.yaml").tasks)


def test_items_are_kept_under_what_the_tokenizer_does_not_how_it_is_written(tiny_tokenizer, tmp_path):
    """One tokenizer serialized differently (another tokenizers/transformers version writes other fields)
    finds the items built with it; a tokenizer that splits text differently does not."""
    import json

    from transformers import AutoTokenizer

    from evalsuite.tasks.ruler import tokenizer_fingerprint

    essays = "The best way to get startup ideas is not to try to think of startup ideas".split() * 40
    base = tokenizer_fingerprint(tiny_tokenizer, essays)
    saved = tmp_path / "same"
    tiny_tokenizer.save_pretrained(saved)
    same = AutoTokenizer.from_pretrained(saved)
    same.backend_tokenizer.enable_truncation(max_length=10**6)  # written differently, splits alike
    assert same.backend_tokenizer.to_str() != tiny_tokenizer.backend_tokenizer.to_str()
    assert tokenizer_fingerprint(same, essays) == base
    spec = json.loads((saved / "tokenizer.json").read_text())
    spec["model"]["merges"] = spec["model"]["merges"][40:]  # fewer merges: longer token sequences
    (saved / "tokenizer.json").write_text(json.dumps(spec))
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(saved), essays) != base
