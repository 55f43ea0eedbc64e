"""bench/prefill_curve.py: a shape the variant cannot hold is refused in one line before any engine
starts (vLLM would refuse it only after the engine is up and the other shapes measured)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import prefill_curve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_a_shape_longer_than_max_model_len_is_refused_before_the_model_or_engine(tmp_path, monkeypatch, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(f"include: {ROOT / 'configs' / 'cpu-smoke.yaml'}\ndefaults: {{max_model_len: 32768}}\n")

    def never(*_a, **_k):
        raise AssertionError("started before the shapes were checked")

    monkeypatch.setattr("evalsuite.run.session.resolve_model", never)
    monkeypatch.setattr("evalsuite.engine.factory.make_engine", never)
    rc = prefill_curve.main([str(config), "--shape", "4096:41", "--shape", "32768:16", "--shape", "32000:16"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "--shape 32768:16:" in err and "variants.bf16.max_model_len 32768" in err and "4096:41" not in err


@pytest.mark.parametrize("limit, refused", [(32768, False), (32016, False), (32015, True), (None, False)])
def test_prompt_and_output_together_must_fit(limit, refused):
    args = prefill_curve.parse_args(["c.yaml", "--shape", "32000:16"])
    if refused:
        with pytest.raises(Exception, match="32000:16"):
            prefill_curve.refuse_long_shapes(args, "bf16", limit)
    else:
        prefill_curve.refuse_long_shapes(args, "bf16", limit)
