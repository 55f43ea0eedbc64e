"""Each field of the records a run folder holds (run.json, result.json, a samples line) says what it means
in the JSON schema, from its docstring, as inspect_ai's EvalSample does; `settings` and `env` are models
whose known keys are typed, open only to the keys a config or a machine adds."""

from __future__ import annotations

import pytest

from evalsuite.core.types import RunRecord, SampleLine, VariantResult


@pytest.mark.parametrize("model", [RunRecord, VariantResult, SampleLine])
def test_every_record_field_carries_its_meaning_in_the_schema(model):
    schema = model.model_json_schema()
    parts = {model.__name__: schema, **schema.get("$defs", {})}
    bare = [f"{part}.{name}" for part, d in parts.items() for name, p in d.get("properties", {}).items()
            if not p.get("description")]
    assert not bare, f"fields without a docstring: {bare}"


def test_the_scheduler_decides_in_scheduling_not_in_env():
    props = RunRecord.model_json_schema()["$defs"]
    assert "scheduler" not in props["RunEnv"]["properties"] and "most_at_once" in props["Scheduling"]["properties"]
    assert props["Scheduling"]["additionalProperties"] is False  # a decision the record does not know is refused
    assert props["RunEnv"].get("additionalProperties") is not False  # a machine fact a later evalsuite adds passes


def test_settings_and_env_are_typed_and_written_as_given():
    v = VariantResult(variant="a", settings={"dtype": "bfloat16", "engine_args": {"kv_cache_memory_bytes": 1}})
    assert v.settings.engine_args["kv_cache_memory_bytes"] == 1 and v.settings.quantize is None
    assert v.model_dump()["settings"] == {"dtype": "bfloat16", "engine_args": {"kv_cache_memory_bytes": 1}}
    r = RunRecord(run_id="r", model="m", env={"device": "cpu", "cpu_count": 2})
    assert r.env.device == "cpu" and r.env.model_dir is None and r.model_dump()["env"] == {"device": "cpu", "cpu_count": 2}
    with pytest.raises(ValueError, match="cpu_count"):
        RunRecord(run_id="r", model="m", env={"cpu_count": "two"})
