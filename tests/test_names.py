"""Facts defined once: a task's primary metric (saved in the record), the quantization methods, GiB."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evalsuite.core import settings, units
from evalsuite.core.types import Metric, VariantResult
from evalsuite.memory import planner
from evalsuite.report.names import primary_metrics
from evalsuite.run.config import Variant


def result(names: list[str], primary: list[str] | None = None) -> VariantResult:
    return VariantResult(variant="bf16", metrics=[Metric(name=n, value=0.5) for n in names],
                         primary_metrics=primary or [])


def test_primary_metrics_come_from_the_record():
    saved = result(["legal/acc", "legal/balanced_acc", "latency/ttft_ms_p50"],
                   ["legal/balanced_acc", "latency/ttft_ms_p50"])
    assert primary_metrics([saved]) == ["legal/balanced_acc"]  # a timing is no accuracy


def test_records_without_the_field_fall_back_to_the_first_score():
    old = VariantResult.model_validate({"variant": "bf16", "metrics": [
        {"name": "mmlu/acc", "value": 0.5}, {"name": "mmlu/acc_macro", "value": 0.4},
        {"name": "mmlu/acc_ci95_low", "value": 0.3}, {"name": "mmlu/wall_s", "value": 3.0},
        {"name": "needle/acc/len512", "value": 1.0}, {"name": "needle/acc", "value": 1.0}]})
    assert primary_metrics([old]) == ["mmlu/acc", "needle/acc"]


def test_one_list_of_quantization_methods():
    assert planner.QUANTIZATIONS == ("none", *settings.QUANTIZATIONS)
    for method in settings.QUANTIZATIONS:
        assert Variant(quantization=method).quantization == method
    with pytest.raises(ValidationError):
        Variant(quantization="bitsandbytes")  # the planner has no model of it


def test_one_gib():
    from evalsuite.engine import fake
    from evalsuite.memory import cuda
    from evalsuite.run import footprint

    assert units.GIB == 2**30 and fake.GIB is cuda.GIB is footprint.GIB is planner.GIB is units.GIB
