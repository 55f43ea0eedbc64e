"""Needle in a haystack: sizing, placement, scoring, schedule, refusal, metrics."""

from __future__ import annotations

import random

import pytest
from pydantic import TypeAdapter, ValidationError

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion, Score
from evalsuite.data.haystack import TokenHaystack, load_documents, resolve_source, splice, split_front_matter
from evalsuite.models.tiny import train_tokenizer
from evalsuite.tasks import TaskConfig
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.needle import NeedleConfig, named_values, needle_value, schedule_cells, value_in

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but "
         "have an they you were her she there all one their we can has more when will would who so no time "
         "people year way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night").split()


def write_corpus(folder, files=4, sentences=400, seed=0):
    """Plain sentences of common words: enough tokens for 2K contexts with the tiny tokenizer."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        text = " ".join(" ".join(rng.choices(WORDS, k=rng.randint(6, 14))).capitalize() + "."
                        for _ in range(sentences))
        (folder / f"doc{f}.txt").write_text(text)
    return folder


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


@pytest.fixture(scope="module")
def hay_dir(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("hay") / "essays")


def make_ctx(tokenizer, hay_dir, max_model_len=4096, seed=0):
    return TaskContext(base_dir=hay_dir.parent, cache_dir=hay_dir.parent / "cache", seed=seed,
                       tokenizer=tokenizer, max_model_len=max_model_len)


def build(tokenizer, hay_dir, **kw):
    kw.setdefault("haystack", hay_dir.name)  # relative to ctx.base_dir
    return NeedleConfig(**kw).build(make_ctx(tokenizer, hay_dir))


@pytest.mark.parametrize("needle", ["single", "multikey", "multivalue"])
@pytest.mark.parametrize("chat", [True, False])
def test_prompt_plus_answer_budget_is_the_cell_length(tokenizer, hay_dir, needle, chat):
    task = build(tokenizer, hay_dir, lengths=[400, 1000, 2048], depths=[0, 0.33, 0.5, 1.0], needle=needle, chat=chat)
    samples = task.samples()
    assert len(samples) == 12
    for s in samples:
        assert len(s.request.prompt_token_ids) + s.request.max_tokens == s.meta["length"]
        assert s.meta["prompt_tokens"] == len(s.request.prompt_token_ids)


def test_chat_template_frames_the_prompt(tokenizer, hay_dir):
    s = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], chat=True).samples()[0]
    text = tokenizer.decode(s.request.prompt_token_ids)
    assert text.startswith("<s><|user|>\nSome special magic numbers")
    assert "<|assistant|>\nThe special magic number for" in text
    assert text.rstrip().endswith("mentioned in the provided text is")
    plain = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], chat=False).samples()[0]
    assert "<|user|>" not in tokenizer.decode(plain.request.prompt_token_ids)
    assert plain.request.prompt_token_ids[0] == tokenizer.bos_token_id


def test_chat_without_template_is_refused(hay_dir):
    tok = train_tokenizer()
    tok.chat_template = None
    with pytest.raises(ConfigError, match="chat template"):
        build(tok, hay_dir, lengths=[512], chat=True).samples()


def _needle_text(tokenizer, s):
    ids = s.request.prompt_token_ids
    i = s.meta["needle_token"]
    return tokenizer.decode(ids[i:i + 40])


def test_needle_sits_at_its_depth(tokenizer, hay_dir):
    depths = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]
    samples = build(tokenizer, hay_dir, lengths=[2048], depths=depths).samples()
    by_depth = {s.meta["depth"]: s for s in samples}
    positions = []
    for d in depths:
        s = by_depth[round(d * 100)]
        key, value = s.meta["key"], s.meta["answers"][0]
        assert _needle_text(tokenizer, s).startswith(f" The special magic number for {key} is: {value}.")
        positions.append(s.meta["needle_token"])
    assert positions == sorted(positions)
    prefix_len = by_depth[0].meta["needle_token"]  # depth 0: straight after the instructions
    span = by_depth[100].meta["needle_token"] - prefix_len  # depth 100: the haystack's end
    for d, p in zip(depths, positions):
        # backed up to a sentence end: at most a sentence (~40 tokens here) before depth x span
        assert d * span - 60 <= p - prefix_len <= d * span + 5  # H differs by a few tokens per key


def test_needle_lands_between_sentences(tokenizer, hay_dir):
    for s in build(tokenizer, hay_dir, lengths=[1024], depths=[0.2, 0.5, 0.8]).samples():
        ids, i = s.request.prompt_token_ids, s.meta["needle_token"]
        assert tokenizer.decode(ids[i - 3:i]).endswith(".")


def test_multikey_distractors_have_other_keys_and_shared_positions(tokenizer, hay_dir):
    samples = build(tokenizer, hay_dir, lengths=[2048], depths=[0.0, 0.5, 1.0], needle="multikey",
                    num_distractors=3).samples()
    texts = [tokenizer.decode(s.request.prompt_token_ids) for s in samples]
    for s, text in zip(samples, texts):
        assert text.count("The special magic number for") == 4 + 1  # 4 needles + the answer prefix
        assert s.meta["key"] not in {v for v in s.meta["distractors"]}
        assert len(set(s.meta["distractors"]) | set(s.meta["answers"])) == 4
        for v in s.meta["distractors"]:
            assert f"is: {v}." in text
    assert len({tuple(s.meta["distractors"]) for s in samples}) == 1  # same decoys at every depth


def test_multivalue_plants_every_value(tokenizer, hay_dir):
    samples = build(tokenizer, hay_dir, lengths=[1024], depths=[0.5], needle="multivalue", num_values=3).samples()
    s = samples[0]
    text = tokenizer.decode(s.request.prompt_token_ids)
    assert len(s.meta["answers"]) == 3 and s.request.max_tokens == 48
    for v in s.meta["answers"]:
        assert f"for {s.meta['key']} is: {v}." in text
    assert "What are all the special magic numbers" in text


def _completion(text, prompt=100, cached=None):
    return Completion(text=text, prompt_tokens=prompt, cached_prompt_tokens=cached)


def test_scoring_is_a_whole_number_string_match(tokenizer, hay_dir):
    task = build(tokenizer, hay_dir, lengths=[512], depths=[0.5])
    s = task.samples()[0]
    v = s.meta["answers"][0]
    assert task.score(s, _completion(f" {v}.")).value == 1.0
    assert task.score(s, _completion(f" {v[0]},{v[1:4]},{v[4:]}")).value == 1.0
    assert task.score(s, _completion(f" {v}9")).value == 0.0  # a longer number is another number
    assert task.score(s, _completion(" 1234")).value == 0.0
    assert value_in("1234567", "x 1234567 y") and not value_in("1234567", "11234567")


def test_multivalue_scoring_fraction_and_all(tokenizer, hay_dir):
    frac = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multivalue", num_values=4)
    s = frac.samples()[0]
    half = " ".join(s.meta["answers"][:2])
    assert frac.score(s, _completion(half)).value == 0.5
    assert frac.score(s, _completion(" ".join(s.meta["answers"]))).value == 1.0
    strict = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multivalue", num_values=4, scoring="all")
    assert strict.score(s, _completion(half)).value == 0.0


def test_named_values_and_thousands_separators():
    assert named_values("1234567, 7654321 and 1,234,567 again") == ["1234567", "7654321"]
    assert named_values("1234567,7654321") == ["1234567", "7654321"]  # a list without spaces: two values
    assert named_values("12345678 123456 2024") == []  # other lengths are not needle values
    assert value_in("7654321", "1234567,7654321") and not value_in("1234567", "12345677654321")


@pytest.mark.parametrize("found, asked, extra, scoring, want", [
    (1, 1, 0, "fraction", 1.0), (1, 1, 1, "fraction", 0.0), (0, 1, 0, "fraction", 0.0),
    (4, 4, 0, "fraction", 1.0), (4, 4, 1, "fraction", 0.8), (2, 4, 0, "fraction", 0.5), (2, 4, 2, "fraction", 1 / 3),
    (4, 4, 1, "all", 0.0), (4, 4, 0, "all", 1.0), (3, 4, 0, "all", 0.0),
])
def test_needle_value_rule(found, asked, extra, scoring, want):
    assert needle_value(found, asked, extra, scoring) == pytest.approx(want)


def test_multikey_answer_naming_a_decoy_is_wrong_unless_ignored(tokenizer, hay_dir):
    """Listing every number of the text used to get full marks; by default it gets none."""
    penalize = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multikey")
    ignore = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multikey", decoys="ignore")
    assert penalize.cfg.decoys == "penalize"
    s = penalize.samples()[0]
    answer, decoys = s.meta["answers"][0], s.meta["distractors"]
    everything = _completion(", ".join([*decoys[:1], answer, *decoys[1:]]))
    sc = penalize.score(s, everything)
    assert sc.value == 0.0 and sc.extra["distractor_hits"] == decoys and sc.extra["extras"] == decoys
    assert ignore.score(s, everything).value == 1.0
    one_decoy = _completion(f"{answer} (or maybe {decoys[1]})")
    assert penalize.score(s, one_decoy).value == 0.0 and ignore.score(s, one_decoy).value == 1.0
    assert penalize.score(s, _completion(f" {answer}.")).value == 1.0


def test_single_needle_with_an_unplanted_value(tokenizer, hay_dir):
    penalize = build(tokenizer, hay_dir, lengths=[512], depths=[0.5])
    ignore = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], decoys="ignore")
    s = penalize.samples()[0]
    answer = s.meta["answers"][0]
    other = next(v for v in ("1000000", "9999999") if v != answer)
    sc = penalize.score(s, _completion(f"{answer} or {other}"))
    assert sc.value == 0.0 and sc.extra["extras"] == [other] and sc.extra["distractor_hits"] == []
    assert ignore.score(s, _completion(f"{answer} or {other}")).value == 1.0


def test_multivalue_extra_values_cost_like_missed_ones(tokenizer, hay_dir):
    frac = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multivalue", num_values=4)
    s = frac.samples()[0]
    answers = s.meta["answers"]
    unplanted = [v for v in ("1000000", "1000001", "9999999") if v not in answers][:2]
    assert frac.score(s, _completion(" ".join(answers + unplanted[:1]))).value == pytest.approx(4 / 5)
    assert frac.score(s, _completion(" ".join(answers[:2] + unplanted))).value == pytest.approx(2 / 6)
    assert frac.score(s, _completion(" ".join(answers + answers))).value == 1.0  # repeats are no extras
    strict = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multivalue", num_values=4, scoring="all")
    assert strict.score(s, _completion(" ".join(answers + unplanted[:1]))).value == 0.0
    lax = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multivalue", num_values=4, decoys="ignore")
    assert lax.score(s, _completion(" ".join(answers[:2] + unplanted))).value == 0.5


def test_decoy_and_extra_value_rates(tokenizer, hay_dir):
    task = build(tokenizer, hay_dir, lengths=[512, 1024], depths=[0.0, 0.5], needle="multikey")
    samples = task.samples()
    assert len(samples) == 4
    texts = [s.meta["answers"][0] for s in samples]
    texts[0] += " " + samples[0].meta["distractors"][0]  # a decoy
    texts[1] += " 1000000"  # a value planted nowhere
    scores = [task.score(s, _completion(t)) for s, t in zip(samples, texts)]
    m = {x.name: x for x in task.metrics(scores)}
    assert m["needle/acc"].value == 0.5
    assert m["needle/decoy_rate"].value == 0.25 and m["needle/decoy_rate"].n == 4
    assert m["needle/extra_value_rate"].value == 0.5
    single = build(tokenizer, hay_dir, lengths=[512], depths=[0.5])
    names = {x.name for x in single.metrics([single.score(single.samples()[0], _completion("x"))])}
    assert "needle/extra_value_rate" in names and "needle/decoy_rate" not in names


def test_recorded_scores_without_extras_still_give_rates(tokenizer, hay_dir):
    """Scores recorded before `extras` existed load and are counted from their stored answer."""
    task = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multikey")
    s = task.samples()[0]
    sc = task.score(s, _completion(f"{s.meta['answers'][0]}, {s.meta['distractors'][0]}"))
    old = sc.model_dump(mode="json")
    del old["extra"]["extras"]
    m = {x.name: x for x in task.metrics([Score.model_validate(old)])}
    assert m["needle/extra_value_rate"].value == 1.0 and m["needle/decoy_rate"].value == 1.0


def test_multikey_records_distractor_hits(tokenizer, hay_dir):
    task = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], needle="multikey")
    s = task.samples()[0]
    sc = task.score(s, _completion(s.meta["distractors"][0], prompt=500, cached=128))
    assert sc.value == 0.0 and sc.extra["distractor_hits"] == [s.meta["distractors"][0]]
    assert sc.extra["cached_prompt_tokens"] == 128


def test_schedule_orders(tokenizer, hay_dir):
    cells = schedule_cells([1024, 512, 2048], [0.0, 1.0, 0.5], [0, 1], "shared_prefix")
    assert cells[:3] == [(0, 2048, 1.0), (0, 2048, 0.5), (0, 2048, 0.0)]
    assert [c[0] for c in cells] == [0] * 9 + [1] * 9
    assert [c[1] for c in cells[:9]] == [2048] * 3 + [1024] * 3 + [512] * 3
    naive = schedule_cells([1024, 512, 2048], [0.0, 1.0, 0.5], [0, 1], "naive")
    assert naive[:3] == [(0, 1024, 0.0), (1, 1024, 0.0), (0, 1024, 1.0)]
    assert sorted(naive) == sorted(cells)


def test_both_schedules_send_the_same_prompts(tokenizer, hay_dir):
    kw = dict(lengths=[512, 1024], depths=[0, 0.5, 1.0], seeds=2, needle="multikey")
    a = build(tokenizer, hay_dir, schedule="shared_prefix", **kw).samples()
    b = build(tokenizer, hay_dir, schedule="naive", **kw).samples()
    assert [s.id for s in a] != [s.id for s in b]
    assert {s.id: s.request for s in a} == {s.id: s.request for s in b}
    assert a[0].id == "needle-s0-len1024-d100"


def _common(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_shared_prefix_reuses_the_first_prompt(tokenizer, hay_dir):
    """Every later prompt of a seed shares with the seed's first one everything up to its needle,
    across depths and across lengths (shorter haystacks are prefixes of longer ones)."""
    samples = build(tokenizer, hay_dir, lengths=[512, 1024, 2048], depths=[0, 0.25, 0.5, 1.0]).samples()
    lead = samples[0].request.prompt_token_ids
    assert samples[0].meta["length"] == 2048 and samples[0].meta["depth"] == 100
    for s in samples[1:]:
        assert _common(lead, s.request.prompt_token_ids) >= s.meta["needle_token"]


def test_seeds_give_other_haystacks_and_needles(tokenizer, hay_dir):
    samples = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], seeds=2).samples()
    assert [s.meta["seed"] for s in samples] == [0, 1]
    assert samples[0].request.prompt_token_ids != samples[1].request.prompt_token_ids
    assert samples[0].target != samples[1].target
    again = build(tokenizer, hay_dir, lengths=[512], depths=[0.5], seeds=2).samples()
    assert [s.request for s in again] == [s.request for s in samples]  # deterministic


def test_length_beyond_max_model_len_is_refused_before_any_request(tokenizer, hay_dir):
    cfg = NeedleConfig(haystack=hay_dir.name, lengths=[1024, 8192])
    with pytest.raises(ConfigError, match=r"8192.*max_model_len 4096"):
        cfg.build(make_ctx(tokenizer, hay_dir, max_model_len=4096))


def test_too_short_length_and_too_small_haystack_are_config_errors(tokenizer, hay_dir, tmp_path):
    with pytest.raises(ConfigError, match="too short"):
        build(tokenizer, hay_dir, lengths=[60]).samples()
    small = write_corpus(tmp_path / "small", files=1, sentences=10)
    task = NeedleConfig(haystack=str(small), lengths=[2048]).build(make_ctx(tokenizer, hay_dir))
    with pytest.raises(ConfigError, match="tokens"):
        task.samples()


def test_haystack_sources(tmp_path, hay_dir):
    assert resolve_source("essays", hay_dir.parent, tmp_path) == hay_dir
    with pytest.raises(ConfigError, match="paul_graham"):
        resolve_source("no-such-folder", tmp_path, tmp_path)
    lic = tmp_path / "lic"
    lic.mkdir()
    (lic / "x.LICENSE").write_text("---\nkey: x\nlanguage: en\nis_generic: yes\n---\n\n" + "Permission granted. " * 20)
    docs = load_documents(lic)
    assert docs[0].meta["key"] == "x" and docs[0].text.startswith("Permission granted.")
    assert split_front_matter("no front matter") == ({}, "no front matter")


def test_token_haystack_positions(tokenizer, hay_dir):
    docs = load_documents(hay_dir)
    hay = TokenHaystack(docs, tokenizer, seed=0, min_tokens=1000)
    assert hay.position(800, 0.0) == 0 and hay.position(800, 1.0) == 800
    assert hay.position(800, 0.5) in hay.boundaries and hay.position(800, 0.5) <= 400
    assert splice([1, 2, 3], [(1, [9]), (1, [8]), (3, [7])]) == [1, 9, 8, 2, 3, 7]


def test_metrics_names_and_uncached_tokens(tokenizer, hay_dir):
    task = build(tokenizer, hay_dir, lengths=[512, 1024], depths=[0.0, 0.5])
    samples = task.samples()
    scores = []
    for i, s in enumerate(samples):
        text = s.meta["answers"][0] if i % 2 == 0 else "no idea"
        scores.append(task.score(s, _completion(text, prompt=s.meta["prompt_tokens"], cached=256 * (i > 0))))
    m = {x.name: x for x in task.metrics(scores)}
    assert task.primary_metric == "needle/acc" and m["needle/acc"].value == 0.5
    assert {"needle/acc/len512", "needle/acc/len1024", "needle/acc/len512_depth0",
            "needle/acc/len1024_depth50"} <= set(m)
    # totals over the items, as their names say: a per-item figure would read as a prompt's length
    total = sum(s.meta["prompt_tokens"] for s in samples)
    assert m["needle/prompt_tokens_total"].value == total and m["needle/prompt_tokens_total"].n == len(samples)
    assert m["needle/uncached_prompt_tokens_total"].value == total - 256 * (len(samples) - 1)
    assert m["needle/prompt_tokens_total"].unit == "tokens" and not {"needle/prompt_tokens",
                                                                     "needle/uncached_prompt_tokens"} & set(m)


def test_config_validation_and_union():
    with pytest.raises(ValidationError, match="fractions"):
        NeedleConfig(depths=[0, 50])
    with pytest.raises(ValidationError, match="whole percents"):
        NeedleConfig(depths=[0.501, 0.502])
    with pytest.raises(ValidationError):
        NeedleConfig(lengths=[1024, 1024])
    with pytest.raises(ValidationError):
        NeedleConfig(schedule="random")
    with pytest.raises(ValidationError):
        NeedleConfig(decoys="forgive")
    cfg = TypeAdapter(TaskConfig).validate_python({"type": "needle", "schedule": "naive", "needle": "multikey"})
    assert isinstance(cfg, NeedleConfig) and cfg.schedule == "naive"


def test_runner_preflight_refuses_before_any_engine(tokenizer, hay_dir):
    from evalsuite.run.config import RunConfig
    from evalsuite.run.items import preflight
    from evalsuite.run.session import min_max_model_len

    cfg = RunConfig.model_validate({
        "model": {"path": "unused"}, "variants": {"short": {"max_model_len": 1024}, "long": {"max_model_len": 4096}},
        "tasks": [{"type": "needle", "haystack": hay_dir.name, "lengths": [512, 2048]}]})
    ctx = make_ctx(tokenizer, hay_dir, max_model_len=min_max_model_len(cfg))
    with pytest.raises(ConfigError, match="2048.*max_model_len 1024"):
        preflight(cfg, ctx)
    cfg.tasks[0].lengths = [512, 1024]
    tasks, samples = preflight(cfg, ctx)
    assert [len(v) for v in samples.values()] == [6] and tasks[0].primary_metric == "needle/acc"
