"""The hostile cases of the third adversarial pass, on the surfaces added since the first two: a variant's
model read as a `vllm serve` option, archives and kept scores that write or delete outside their folder,
credentials sent to any host, and damaged archives, kept scores and records. Each is refused in one line
with exit 2 (or handled as docs/safety.md says), within 60 s, and never touches a file outside.

The engine is the fake one where a run is needed; records, archives, configs, HTTP servers and the CLI are
real. Ray's listeners are checked on a real cluster in test_ray.py.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
import yaml

from tests.test_bad_input import REPO, write
from tests.test_damaged_run_folders import alarm
from tests.test_hostile_input import fake_run, invoke, one_line
from tests.test_results_archive import _hostile, data_files, packed, run

SERVER = "engine: {mode: server}\n"


def within(seconds: float, *args: str):
    """The command in this process, ended as a hang after `seconds`."""
    with alarm(seconds):
        return invoke(*args)


# ---------------------------------------------------------------- 1. no string becomes a flag


@pytest.mark.parametrize("text,key", [
    ("variants: {a: {model: '--tool-parser-plugin=x.py'}}", "variants.a.model"),
    ("variants: {a: {model: '--reasoning-parser-plugin=x.py'}}", "variants.a.model"),
    ("defaults: {model: '-x'}\nvariants: {a: {}}", "variants.a.model"),
])
def test_a_variants_model_is_never_an_option(tmp_path, text, key):
    """`vllm serve MODEL`: a model `--tool-parser-plugin=FILE.py` had vLLM import FILE.py as root, and
    `validate` said ok."""
    cfg = write(tmp_path, f"model: {{path: model_x}}\n{text}\n{SERVER}")
    one_line(invoke("validate", str(cfg)), f"{key}: ", "starts with '-', which a command line takes for an option",
             "write ./-NAME")


@pytest.mark.parametrize("model,key,said", [
    ("{path: '-x'}", "model.path", "starts with '-'"),
    ("{gguf: '--x.gguf'}", "model.gguf", "starts with '-'"),
    ("{path: model_x, tokenizer: '--trust-remote-code'}", "model.tokenizer", "starts with '-'"),
    # a crash before: huggingface_hub's HFValidationError as a traceback
    ("{hf: '--tool-parser-plugin=x.py'}", "model.hf", "is not a Hugging Face repository id"),
    ("{hub: '-org/name'}", "model.hub", "is not a Hugging Face repository id"),
    ("{hf: org/name, revision: '--x'}", "model.revision", "is not a revision"),
    ("{hf: org/name, revision: 'a b'}", "model.revision", "is not a revision"),
])
def test_the_models_strings_are_never_options(tmp_path, model, key, said):
    cfg = write(tmp_path, f"model: {model}\nvariants: {{a: {{}}}}\n{SERVER}")
    one_line(invoke("validate", str(cfg)), f"{key}: ", said)


@pytest.mark.parametrize("plugin", ["tool_parser_plugin", "reasoning_parser_plugin", "middleware"])
def test_vllm_serve_plugin_options_need_the_switch(tmp_path, plugin):
    cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{a: {{engine_args: {{{plugin}: x.py}}}}}}\n{SERVER}")
    one_line(invoke("validate", str(cfg)), f"variants.a.engine_args.{plugin}: can name code",
             "engine.unsafe_engine_args: true")
    allowed = write(tmp_path, cfg.read_text().replace("server}", "server, unsafe_engine_args: true}"), "ok.yaml")
    res = invoke("validate", str(allowed))
    assert res.exit_code == 0 and f"(variants.a.engine_args.{plugin})" in res.stdout, res.output


def test_a_list_item_never_becomes_a_serve_option(tmp_path):
    """A list's items follow its flag; one that reads as an option is refused, with or without the switch."""
    from evalsuite.engine.server import cli_args, serve_command

    for engine in (SERVER, SERVER.replace("server}", "server, unsafe_engine_args: true}")):
        cfg = write(tmp_path, "model: {path: model_x}\nvariants: {a: {engine_args: {served_model_name: "
                              "[m, '--tool-parser-plugin=x.py']}}}\n" + engine)
        one_line(invoke("validate", str(cfg)), "variants.a.engine_args.served_model_name: an item starts with '-'")
    with pytest.raises(ValueError):
        cli_args({"served_model_name": ["m", "--tool-parser-plugin=x.py"]})
    assert cli_args({"cudagraph_capture_sizes": [-1, 2]}) == ["--cudagraph-capture-sizes", "-1", "2"]
    cmd = serve_command("-m", 8123, {})
    assert cmd[cmd.index("serve") + 1] == "./-m"


def test_the_serve_entry_refuses_an_option_for_a_model_and_imports_no_plugin(tmp_path):
    """The last gate, evalsuite's own entry to `vllm serve`: before it, vLLM imported the plugin (a marker
    file written as root) and only then failed to find a model."""
    marker = tmp_path / "marker"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    res = subprocess.run([sys.executable, "-m", "evalsuite.engine.vllm_cli", "serve", f"--tool-parser-plugin={plugin}",
                          "--host", "127.0.0.1", "--port", "9"], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2 and res.stderr.strip().startswith("evalsuite: error: serve: the model must come first"), \
        res.stderr
    assert not marker.exists()


def test_the_load_generator_binds_every_string_to_its_flag(tmp_path):
    """An attached server names its model itself: an id `--x` stays the value of --model."""
    from evalsuite.capacity.config import CapacityConfig
    from evalsuite.capacity.loadgen import bench_command

    cmd = bench_command(CapacityConfig(concurrency=[1]), "http://127.0.0.1:9", "--tool-parser-plugin=x.py", "-tok", 64,
                        1, Path("-out") / "x.json", seed=0)
    assert "--model=--tool-parser-plugin=x.py" in cmd and "--tokenizer=-tok" in cmd
    assert Path(cmd[cmd.index("--result-dir") + 1]).is_absolute()
    assert not [a for a in cmd if a.startswith("--tool") or a == "-tok"]


# ---------------------------------------------------------------- 2-3. archives stay in their folder


def _fetch(clone: Path, archives: Path, *more: str) -> tuple[int, str]:
    with alarm(60):
        return run("results", "fetch", "tiny", "--root", str(clone), "--from", str(archives), *more)


def _forged(clone: Path, archives: Path, members: dict[str, bytes]) -> None:
    """A new version of the page's archive holding `members`, its record forged to match (as a page
    edited in a pull request would be)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    record = json.loads((clone / "tiny" / "archive.json").read_text())
    record.update(version=record["version"] + 1, sha256=hashlib.sha256(raw.getvalue()).hexdigest(),
                  bytes=len(raw.getvalue()), files=len(members), unpacked_bytes=sum(map(len, members.values())))
    record["file"] = f"tiny-v{record['version']}.tar.gz"
    (archives / record["file"]).write_bytes(raw.getvalue())
    (clone / "tiny" / "archive.json").write_text(json.dumps(record))


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_fetch_never_deletes_a_file_its_record_names_outside_the_page(tmp_path, how):
    """`.fetched.json` is data: its list named `../../../../x` or `/x`, and fetch deleted them and exited 0."""
    clone, archives = packed(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs\n")
    assert _fetch(clone, archives)[0] == 0
    marker = clone / "tiny" / ".fetched.json"
    record = json.loads(marker.read_text())
    named = os.path.relpath(victim, clone / "tiny") if how == "relative" else str(victim)
    marker.write_text(json.dumps({**record, "files": [*record["files"], named]}))
    _forged(clone, archives, {"tiny/x0": b"x"})  # a new version: the files it lacks would be removed
    code, out = _fetch(clone, archives)
    assert code == 2 and len(out.strip().splitlines()) == 1 and f"{marker}: not a fetch record: files" in out, out
    assert victim.read_text() == "theirs\n"


def test_fetch_never_deletes_through_a_linked_folder(tmp_path):
    """A file of the page's own, as the record lists it, reached through a folder someone linked elsewhere."""
    clone, archives = packed(tmp_path)
    assert _fetch(clone, archives)[0] == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "latency.png").write_text("theirs\n")
    shutil.rmtree(clone / "tiny" / "report")
    (clone / "tiny" / "report").symlink_to(outside)
    _forged(clone, archives, {"tiny/x0": b"x"})
    code, out = _fetch(clone, archives)
    assert code == 0, out
    assert (outside / "latency.png").read_text() == "theirs\n"
    assert (clone / "tiny" / "x0").read_bytes() == b"x"


@pytest.mark.parametrize("link", ["folder", "file"])
def test_fetch_never_writes_through_a_link(tmp_path, link):
    """Only the last part of a path was checked: a link `tiny/cfg -> elsewhere` and a member
    `tiny/cfg/authorized_keys` replaced the file elsewhere."""
    clone, archives = packed(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "authorized_keys").write_text("theirs\n")
    if link == "folder":
        (clone / "tiny" / "cfg").symlink_to(outside)
    else:
        (clone / "tiny" / "cfg").mkdir()
        (clone / "tiny" / "cfg" / "authorized_keys").symlink_to(outside / "authorized_keys")
    _forged(clone, archives, {"tiny/cfg/authorized_keys": b"ssh-ed25519 AAAA attacker\n"})
    code, out = _fetch(clone, archives)
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert ("a symbolic link or a file where a folder is expected" if link == "folder" else "a link where a file goes") \
        in out
    assert (outside / "authorized_keys").read_text() == "theirs\n"
    assert not list(tmp_path.rglob(".fetch-*"))


# ---------------------------------------------------------------- 4. export writes only inside DIR


@pytest.fixture(scope="module")
def made(tmp_path_factory, tiny_model):
    """(a config, its fake run folder, a folder of that run's kept scores): untouched."""
    tmp = tmp_path_factory.mktemp("surfaces")
    cfg, run_dir = fake_run(tmp, tiny_model)
    kept = tmp / "kept"
    assert invoke("export", str(run_dir), "--scores", str(kept)).exit_code == 0
    return cfg, run_dir, kept


@pytest.fixture
def copy(made, tmp_path):
    """A copy of the made run (and kept scores) of this test's own."""
    cfg, run_dir, kept = made
    shutil.copytree(run_dir, tmp_path / "runs" / run_dir.name)
    shutil.copytree(kept, tmp_path / "kept")
    return cfg, tmp_path / "runs" / run_dir.name, tmp_path / "kept"


@pytest.mark.parametrize("planted", ["bf16", "bf16/result.json", "bf16/config.yaml", "bf16/mmlu.scores.jsonl.gz"])
def test_export_never_writes_through_a_link_planted_in_its_folder(copy, tmp_path, planted):
    _, run_dir, _ = copy
    kept, outside = tmp_path / "planted", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("theirs\n")
    (kept / planted).parent.mkdir(parents=True, exist_ok=True)
    (kept / planted).symlink_to(outside if planted == "bf16" else outside / "victim")
    if planted == "bf16":
        (outside / "result.json").write_text("theirs\n")
    res = within(60, "export", str(run_dir), "--scores", str(kept))
    if planted == "bf16":  # a linked folder on the way: refused
        one_line(res, f"{kept / 'bf16'}: a symbolic link or a file where a folder is expected")
    elif planted.endswith((".json", ".yaml")):  # read before the new one is merged in: refused, not followed
        one_line(res, f"{kept / planted}: a symbolic link")
    else:  # a linked file only written: replaced by the file, never written through
        assert res.exit_code == 0, res.output
        assert not (kept / planted).is_symlink() and (kept / planted).stat().st_size > 0
    assert sorted(p.name for p in outside.iterdir()) == (["result.json", "victim"] if planted == "bf16" else ["victim"])
    assert all(p.read_text() == "theirs\n" for p in outside.iterdir())


# ---------------------------------------------------------------- 6. credentials go only to named hosts


def _other_host() -> tuple[str, str]:
    """(a name of this machine that is not loopback's, the address to listen on for it): an IPv4 address
    of another interface, else the machine's hostname (which may resolve to 127.0.1.1: evalsuite goes by
    the name the config gives, so it is a host other than this machine's loopback all the same)."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address, a.address
    name = socket.gethostname()
    return name, socket.gethostbyname(name)


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def _any(self):
        type(self).seen.append(dict(self.headers))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _any

    def log_message(self, *args):
        pass


@pytest.fixture
def elsewhere():
    """A real HTTP server on this machine's non-loopback address, recording every request's headers."""
    host, bind = _other_host()
    _Recorder.seen = []
    server = ThreadingHTTPServer((bind, 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://{host}:{server.server_address[1]}", _Recorder.seen
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("section", ["engine: {mode: server, base_url: URL}", "tracking: {uri: URL}",
                                     "scheduler: {kind: ray, address: 'HOST:PORT'}"])
def test_a_host_beyond_loopback_needs_allow_hosts_and_is_noted(tmp_path, section):
    """`engine.base_url` on another host received `Authorization: Bearer $VLLM_API_KEY` with the prompts, and
    `tracking.uri` $MLFLOW_TRACKING_TOKEN, with no switch and no note."""
    text = section.replace("URL", "http://gpu-box.example:8000").replace("HOST:PORT", "gpu-box.example:6379")
    key = {"eng": "engine.base_url", "tra": "tracking.uri", "sch": "scheduler.address"}[section[:3]]
    cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{a: {{}}}}\n{text}\n")
    one_line(invoke("validate", str(cfg)), f"{key}: host gpu-box.example is not this machine",
             "refused unless `allow_hosts` names it")
    allowed = write(tmp_path, cfg.read_text() + "allow_hosts: [GPU-box.example]\n", "ok.yaml")
    res = invoke("validate", str(allowed))
    assert res.exit_code == 0 and f"note: allow_hosts: {key} reaches gpu-box.example: " in res.stdout, res.output
    local = write(tmp_path, cfg.read_text().replace("gpu-box.example", "127.0.0.1"), "local.yaml")
    res = invoke("validate", str(local))
    assert res.exit_code == 0 and "note: allow_hosts" not in res.stdout, res.output


@pytest.mark.parametrize("hosts,said", [(["other.example"], "named by no setting"),
                                        (["*.example"], "is not a host"), (["http://x:1"], "is not a host")])
def test_allow_hosts_names_hosts_in_full_and_each_is_used(tmp_path, hosts, said):
    cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{a: {{}}}}\nallow_hosts: {json.dumps(hosts)}\n")
    one_line(invoke("validate", str(cfg)), "allow_hosts", said)


def test_no_request_reaches_a_host_not_named(tmp_path, elsewhere, tiny_model):
    """End to end, against a real server on this machine's other address: neither `run` (its prompts and
    $VLLM_API_KEY) nor `sync` of a run folder naming the server (MLflow's token) sends it anything."""
    url, seen = elsewhere
    cfg = write(tmp_path, yaml.safe_dump({"model": {"path": str(tiny_model)}, "variants": {"a": {}},
                                          "engine": {"mode": "server", "base_url": url}, "tracking": {"enabled": False},
                                          "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 2}]}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_API_KEY": "sk-secret-vllm", "MLFLOW_TRACKING_TOKEN": "tok-secret"}
    env.pop("MLFLOW_TRACKING_URI", None)
    res = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(cfg), "-o", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 2 and "engine.base_url: host" in res.stderr and "sk-secret" not in res.stderr, res.stderr
    _, run_dir = fake_run(tmp_path, tiny_model, "sync")
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    recorded["tracking"] = {"enabled": True, "uri": url, "experiment": "x"}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(recorded))
    res = subprocess.run([sys.executable, "-m", "evalsuite", "sync", str(run_dir)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert res.returncode == 1 and "tracking.uri names host" in res.stderr and "--uri" in res.stderr, res.stderr
    assert seen == []


# ---------------------------------------------------------------- 7. damaged data: one line, exit 2, no hang


def test_fetch_of_an_archive_that_is_no_gzip_tar_is_one_line(tmp_path):
    """A non-gzip file (a ReadError traceback before) and one cut short ("Aborted." alone before), each with the
    sha256 its record says."""
    clone, archives = packed(tmp_path)
    good = (archives / "tiny-v1.tar.gz").read_bytes()
    for data in (b"not a gzip file at all", good[: len(good) // 2]):
        record = json.loads((clone / "tiny" / "archive.json").read_text())
        record.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        (clone / "tiny" / "archive.json").write_text(json.dumps(record))
        (archives / "tiny-v1.tar.gz").write_bytes(data)
        code, out = _fetch(clone, archives)
        assert code == 2 and len(out.strip().splitlines()) == 1 and "not a gzip tar archive, or cut short" in out, out
        assert data_files(clone / "tiny") == {} and not list(tmp_path.rglob(".fetch-*"))


@pytest.mark.parametrize("damage,said", [
    (lambda p: p.write_text("[1]"), "not a fetch record: Input should be an object"),
    (lambda p: p.write_text('{"file": "x", "sha256": "' + "0" * 64 + '", "files": [], "files": ["../x"]}'),
     "given twice"),
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
])
def test_a_damaged_fetch_record_is_one_line(tmp_path, damage, said):
    clone, archives = packed(tmp_path)
    damage(clone / "tiny" / ".fetched.json")
    code, out = _fetch(clone, archives)
    assert code == 2 and len(out.strip().splitlines()) == 1 and said in out and ".fetched.json" in out, out


@pytest.mark.parametrize("change,said", [
    ({"file": "/etc/passwd"}, "is not this page's archive"),  # it was read and hashed
    ({"file": "../tiny-v1.tar.gz"}, "is not this page's archive"),
    ({"bytes": 1 << 40}, "bytes: Input should be less than or equal to"),
    ({"summaries": ["../../x"]}, "summaries"),
    ({"page": "other", "file": "other-v1.tar.gz"}, "not an archive record of this page"),
])
def test_an_archive_record_is_data(tmp_path, change, said):
    clone, archives = packed(tmp_path)
    path = clone / "tiny" / "archive.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    code, out = _fetch(clone, archives)
    assert code == 2 and len(out.strip().splitlines()) == 1 and said in out and str(path) in out, out


def test_a_megabyte_member_name_is_not_echoed(tmp_path):
    clone, archives = packed(tmp_path)
    _hostile(clone, archives, "tiny/" + "a" * (1 << 20))
    code, out = _fetch(clone, archives)
    assert code == 2 and len(out) < 1000 and "not a file of tiny/" in out, out[:300]


class _Trickle(BaseHTTPRequestHandler):
    """Promises the whole archive, then sends a byte every half second."""

    size = 0

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(self.size))
        self.end_headers()
        try:
            for _ in range(self.size):
                self.wfile.write(b"\0")
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_a_trickling_server_meets_the_downloads_deadline(tmp_path, monkeypatch):
    """Each byte came within the read timeout, so nothing ended the download before."""
    from evalsuite.results import sources

    clone, _ = packed(tmp_path)
    _Trickle.size = json.loads((clone / "tiny" / "archive.json").read_text())["bytes"]
    monkeypatch.setattr(sources, "DEADLINE_S", 2.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        code, out = _fetch(clone, Path("unused"), "--from", f"http://127.0.0.1:{server.server_address[1]}/")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 1 and "the longest a fetch of this size may take" in out and len(out.strip().splitlines()) == 1, out
    assert time.monotonic() - t0 < 30 and data_files(clone / "tiny") == {} and not list(tmp_path.rglob(".fetch-*"))


def _gz(text: bytes) -> bytes:
    return gzip.compress(text)


def _bomb(path: Path) -> None:
    """A gzip of 300 kB that unpacks to 320 MiB of zeros (a real bomb's ratio; a bigger one only takes longer
    to make)."""
    with gzip.open(path, "wb", compresslevel=1) as gz:
        block = bytes(64 << 20)
        for _ in range(5):
            gz.write(block)


@pytest.mark.parametrize("damage,said", [
    ("deep", "nested too deeply"),
    ("group_list", "group"),
    ("nan", "value: nan"),
    ("infinity", "value: inf"),
    ("duplicate", "given twice"),
    ("fifo", "not a regular file"),
    ("bomb", "unpacks to more than 256 MiB"),
    ("result_fifo", "result.json: not a regular file"),
    ("config_laughs", "too large (YAML aliases?)"),
])
def test_import_of_damaged_kept_scores_is_one_line(copy, tmp_path, damage, said):
    """Each was a traceback, a hang, an unbounded read or (NaN) an import with exit 0 that `gate` then failed
    on with exit 70; a FIFO result.json silently dropped its variant."""
    _, _, kept = copy
    f = kept / "worse" / "mmlu.scores.jsonl.gz"
    row = json.loads(gzip.decompress(f.read_bytes()).splitlines()[0])
    if damage == "deep":
        f.write_bytes(_gz(b'{"sample_id": "a", "extra": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"))
    elif damage == "group_list":
        f.write_bytes(_gz(json.dumps({**row, "group": ["anatomy"]}).encode()))
    elif damage in ("nan", "infinity"):
        f.write_bytes(_gz(json.dumps({**row, "value": float(damage[:3])}).encode()))
    elif damage == "duplicate":
        f.write_bytes(_gz(json.dumps(row)[:-1].encode() + b', "value": 0.0}\n'))
    elif damage == "fifo":
        f.unlink()
        os.mkfifo(f)
    elif damage == "bomb":
        _bomb(f)
    elif damage == "result_fifo":
        f = kept / "worse" / "result.json"
        f.unlink()
        os.mkfifo(f)
    else:  # billion laughs: 10 aliases of 10 aliases ... nine deep, 10**10 leaves in 300 bytes
        f = kept / "bf16" / "config.yaml"
        f.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(9)))
        shutil.copyfile(f, kept / "worse" / "config.yaml")  # the kept configs agree: bf16's is read
    res = within(60, "import", str(kept), str(tmp_path / "out"))
    one_line(res, str(f), said)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage,said", [
    ("log_fifo", "engine.log: not a regular file"),
    ("log_devzero", "engine.log: not a regular file"),
    ("config_deep", "nested too deeply"),
    ("result_fifo", "result.json: not a regular file"),
])
def test_export_reads_the_run_folder_as_data(copy, tmp_path, damage, said):
    """export read run files with plain reads: a FIFO hung it, /dev/zero filled memory, deep YAML recursed."""
    _, run_dir, _ = copy
    name = {"log": "worse/engine.log", "config": "config.yaml", "result": "worse/result.json"}[damage.split("_")[0]]
    target = run_dir / name
    target.unlink(missing_ok=True)
    if damage.endswith("fifo"):
        os.mkfifo(target)
    elif damage == "log_devzero":
        target.symlink_to("/dev/zero")
    else:
        target.write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n")
    res = within(60, "export", str(run_dir), "--scores", str(tmp_path / "k"))
    one_line(res, str(run_dir), said)


def test_resume_with_a_fifo_for_phases_is_one_line(copy):
    """Appending a timed span opened the FIFO for writing, which waits for a reader forever."""
    cfg, run_dir, _ = copy
    (run_dir / "phases.jsonl").unlink()
    os.mkfifo(run_dir / "phases.jsonl")
    (run_dir / "worse" / "result.json").write_text(
        (run_dir / "worse" / "result.json").read_text().replace('"status": "ok"', '"status": "running"'))
    res = within(60, "run", str(cfg), "--resume", "-o", str(run_dir.parent), "--no-progress")
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines()[-1].startswith(f"evalsuite: error: {run_dir / 'phases.jsonl'}: not a regular")


def test_a_fifo_run_lock_is_said_as_such(copy):
    _, run_dir, _ = copy
    (run_dir / "run.lock").unlink(missing_ok=True)
    os.mkfifo(run_dir / "run.lock")
    one_line(within(60, "finish", str(run_dir)), f"{run_dir / 'run.lock'}: not a regular file")


def test_a_count_beyond_64_bits_is_refused_not_an_overflow(copy):
    """compare raised OverflowError on a metric n of 10**4000 (Wilson's interval took it as a float)."""
    _, run_dir, _ = copy
    path = run_dir / "run.json"
    path.write_text(path.read_text().replace('"n": 8', '"n": 1' + "0" * 4000, 1))
    one_line(within(60, "compare", str(run_dir)), f"{path}: not a JSON record: variants.", ".n: an integer beyond 64 bits")


@pytest.mark.parametrize("where,change,said", [
    ("run.json", lambda t: t.replace('"run_id":', '"model": "x", "run_id":', 1), "key 'model' given twice"),
    ("run.json", lambda t: t.replace('"stderr": null', '"stderr": Infinity', 1), ".stderr: inf"),
    ("worse/samples/mmlu.jsonl", lambda t: t.replace('"value": 1.0', '"value": NaN', 1).replace(
        '"value": 0.0', '"value": NaN', 1), "score.value: nan is not a score"),
])
def test_nan_infinity_and_duplicate_keys_are_refused_where_read(copy, where, change, said):
    _, run_dir, _ = copy
    path = run_dir / where
    text = path.read_text()
    assert change(text) != text
    path.write_text(change(text))
    res = within(60, "gate", "--baseline", f"{run_dir}:bf16", "--candidate", f"{run_dir}:worse")
    one_line(res, str(path), said)


def test_gate_on_a_stopped_task_without_the_baselines_samples_is_one_line(copy):
    """A candidate's record says `--stop decided` ended its task, by the baseline's items, which are not there:
    the gate ended in IndexError (exit 70, "a bug"), compare in a traceback."""
    _, run_dir, _ = copy
    stop = {"mmlu": {"items": 4, "of": 8, "seed": 0, "decided": {}}}
    for path in (run_dir / "worse" / "result.json", run_dir / "run.json"):
        data = json.loads(path.read_text())
        for v in data["variants"] if "variants" in data else [data]:
            if v["variant"] == "worse":
                v["stopped"] = stop
        path.write_text(json.dumps(data))
    (run_dir / "bf16" / "samples" / "mmlu.jsonl").unlink()
    for args in (["gate", "--baseline", f"{run_dir}:bf16", "--candidate", f"{run_dir}:worse"], ["compare", str(run_dir)]):
        one_line(within(60, *args), f"{run_dir / 'bf16' / 'samples' / 'mmlu.jsonl'}: no scored items",
                 "stopped.mmlu")


# ---------------------------------------------------------------- 8. absurd capacity values


@pytest.mark.parametrize("capacity,key", [
    ("{concurrency: [1000000000000]}", "capacity.concurrency.0: Input should be less than or equal to 100000"),
    ("{timeout_s: .inf}", "capacity.timeout_s: Input should be a finite number"),
    ("{slo: {ttft_p90_ms: .inf}}", "capacity.slo.ttft_p90_ms: Input should be a finite number"),
    ("{request_rate: [.nan]}", "capacity.request_rate.0: Input should be a finite number"),
    ("{prompt_tokens: [100000000000]}", "capacity.prompt_tokens.0: Input should be less than or equal to"),
])
def test_absurd_capacity_values_are_refused(tmp_path, capacity, key):
    cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{a: {{}}}}\n{SERVER}capacity: {capacity}\n")
    one_line(invoke("validate", str(cfg)), key)


def test_an_infinite_engine_timeout_is_refused(tmp_path):
    cfg = write(tmp_path, "model: {path: model_x}\nvariants: {a: {}}\nengine: {startup_timeout_s: .inf}\n")
    one_line(invoke("validate", str(cfg)), "engine.startup_timeout_s: Input should be a finite number")
