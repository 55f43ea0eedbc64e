"""Longest first (evalsuite.run.order): the order a packed run starts its variants in, from pure figures."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from evalsuite.core.types import Request, Sample
from evalsuite.run.config import Variant
from evalsuite.run.order import RULE, Work, longest_first, order_record, order_variants
from tests.shapes import LLAMA_8B

H100 = "NVIDIA H100 80GB HBM3"


def test_builds_go_first_then_the_most_predicted_seconds_and_ties_keep_their_order():
    works = [Work("a", False, 60.0, 100.0), Work("b", False, 60.0, 900.0), Work("int4", True, 60.0, 50.0),
             Work("c", False, None, None), Work("d", False, None, None)]
    assert [w.variant for w in longest_first(works)] == ["int4", "b", "a", "c", "d"]
    rows = order_record(longest_first(works))
    assert rows["order_rule"] == RULE and rows["order"][1] == {
        "variant": "b", "build": False, "start_s": 60.0, "tasks_s": 900.0, "source": ""}


def _model(tmp_path: Path) -> Path:
    folder = tmp_path / "llama-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_8B))
    return folder


def _samples(name: str, n: int, prompt: int, answer: int = 1) -> list[Sample]:
    return [Sample(id=f"{name}{i}", task=name, request=Request(prompt_token_ids=[1] * prompt, max_tokens=answer), target="A")
            for i in range(n)]


def test_on_a_card_the_variant_with_more_gpu_seconds_starts_first(tmp_path):
    """FP8 weights read half the bytes of bf16's: on the same items the roofline gives bf16 more seconds,
    so bf16 starts before FP8 whatever the config's order; the INT4 build goes before both."""
    model = _model(tmp_path)
    tasks = [SimpleNamespace(name="short"), SimpleNamespace(name="long")]
    samples = {"short": _samples("s", 200, 700), "long": _samples("l", 40, 32000, 16)}
    todo = {"fp8": Variant(quantization="fp8"), "bf16": Variant(), "awq": Variant(quantize="awq")}
    works = order_variants(todo, tasks, samples, str(model), H100, 80.0, tmp_path / "cache", "offline")
    assert [w.variant for w in works] == ["awq", "bf16", "fp8"]
    seconds = {w.variant: w.tasks_s for w in works}
    assert seconds["bf16"] > seconds["fp8"] > 0 and works[1].source == "roofline"
    # the long prompts are most of the work: 40 items of 32K against 200 of 700 tokens
    only_long = order_variants({"bf16": Variant()}, tasks[1:], samples, str(model), H100, 80.0, None, "offline")
    assert only_long[0].tasks_s > 0.5 * seconds["bf16"]


def test_past_engine_starts_count_and_a_cpu_keeps_the_order_given(tmp_path):
    from evalsuite.run.progress import StartTimes, start_key

    model = _model(tmp_path)
    cache = tmp_path / "cache"
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(LLAMA_8B))
    StartTimes(cache).add(start_key("offline", str(other)), 300.0)
    StartTimes(cache).add(start_key("offline", str(model)), 30.0)
    todo = {"a": Variant(), "b": Variant(model=str(other))}
    tasks, samples = [SimpleNamespace(name="t")], {"t": _samples("x", 10, 100)}
    works = order_variants(todo, tasks, samples, str(model), "CPU: test", 8.0, cache, "offline")
    assert [(w.variant, w.start_s, w.tasks_s) for w in works] == [("b", 300.0, None), ("a", 30.0, None)]
    assert works[0].source == "no curve, and no roofline on this device"
    works = order_variants({"x": Variant(), "y": Variant()}, tasks, samples, str(model), "CPU: test", 8.0, None,
                           "fake")
    assert [w.variant for w in works] == ["x", "y"]  # nothing to tell them apart: as given
