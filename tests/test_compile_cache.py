"""Where vLLM's caches go: evalsuite's cache folder, one inductor cache shared by every variant."""

from __future__ import annotations

from pathlib import Path

from evalsuite.models.compile_cache import engine_env


def test_cpu_engines_share_one_inductor_cache_without_aot(monkeypatch, tmp_path):
    for name in ("VLLM_CACHE_ROOT", "VLLM_USE_AOT_COMPILE", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    env = engine_env({"dtype": "bfloat16"}, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, tmp_path, "cpu")
    assert env == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CACHE_ROOT": str(tmp_path / "vllm"),
                   "VLLM_USE_AOT_COMPILE": "0", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "vllm" / "torchinductor")}
    # the model's path is not part of it: a simulated copy of the same shape finds the baseline's kernels
    assert engine_env({"dtype": "bfloat16", "model": "/elsewhere"}, {}, tmp_path, "cpu")["TORCHINDUCTOR_CACHE_DIR"] \
        == env["TORCHINDUCTOR_CACHE_DIR"]


def test_gpu_and_eager_keep_vllms_own_compile_cache(monkeypatch, tmp_path):
    for name in ("VLLM_CACHE_ROOT", "VLLM_USE_AOT_COMPILE", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert engine_env({}, {}, tmp_path, "gpu") == {"VLLM_CACHE_ROOT": str(tmp_path / "vllm")}
    assert engine_env({"enforce_eager": True}, {}, tmp_path, "cpu") == {"VLLM_CACHE_ROOT": str(tmp_path / "vllm")}


def test_what_the_user_set_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/mine/vllm")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/mine/inductor")
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    env = engine_env({}, {"VLLM_USE_AOT_COMPILE": "1"}, tmp_path, "cpu")
    assert env == {"VLLM_USE_AOT_COMPILE": "1"}  # the process environment reaches the engine as it is


def test_torchs_own_default_is_not_taken_for_the_users_choice(monkeypatch, tmp_path):
    """torch writes its default into os.environ the first time it looks (the parent loads a
    tokenizer, so it has looked); that must not keep the engine out of evalsuite's cache."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    env = engine_env({}, {}, tmp_path, "cpu")
    assert Path(env["TORCHINDUCTOR_CACHE_DIR"]) == tmp_path / "vllm" / "torchinductor"
