"""The run directory: everything a run produced, readable without the code that wrote it.

runs/<run_id>/
  config.yaml            resolved config (includes and defaults applied)
  env.json               evalsuite commit, library versions, CPU/GPU names
  run.json               RunRecord (schema_version, variants with status, metrics, engine stats)
  <variant>/result.json  VariantResult, rewritten as the variant progresses
  <variant>/samples/<task>.jsonl   one line per sample: sample, completion, score
  <variant>/engine.log   vLLM's own output; <variant>/capacity/: the load generator's, per level
  phases.jsonl           one line per timed span of the run, appended as each ends (bench/decision_wall.py)
  run.lock               held by the one process writing the folder; names it (pid, host)
  disk.reserve           room on the disk while a run writes, given back at its end (RESERVE_BYTES)

Every file is read back as data (the readers at the end): evalsuite may be handed folders that others
wrote or damaged.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import math
import os
import stat
import re
import secrets
import socket
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from evalsuite.core.errors import PATH_KIND_HINTS, STORAGE_ERRNOS, ConfigError, EvalsuiteError, StorageError
from evalsuite.core.files import parse_json, parse_yaml, read_regular
from evalsuite.core.migrate import upgraded
from evalsuite.core.outputs import FOLDER_HINT
from evalsuite.core.types import RecordedConfig, RecordedEnv, RunRecord, SampleLine, VariantResult

M = TypeVar("M", bound=BaseModel)

# A variant or task name becomes a folder or file name inside the run folder: no path parts, no
# leading dot (".", "..", hidden files), nothing a shell or a URL must quote; 128 characters at most.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
SAFE_NAME_RULE = (f"allowed: {SAFE_NAME.pattern}: letters, digits, '_', '.', '-', starting with a letter or digit, "
                  f"at most 128 characters")

# Writes below the run folder never follow a symbolic link planted there (the final part of a path).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
LINKED = "{path}: a symbolic link inside the run folder; evalsuite writes only inside it (remove the link)"
# The run folder's own files; each variant folder's result, engine log and folder of samples files
RUN_FILE, CONFIG_FILE, ENV_FILE, ENGINE_LOG = "run.json", "config.yaml", "env.json", "engine.log"
RESULT_FILE, SAMPLES_DIR, SAMPLES_SUFFIX, CAPACITY_DIR = "result.json", "samples", ".jsonl", "capacity"
LOCK_FILE = "run.lock"
# Room kept on the run folder's disk while a run writes (RunDir.reserve_space): a full disk stops the run
# at a samples write, and freeing this much lets its records say what it did (the variant `partial`).
RESERVE_FILE, RESERVE_BYTES = "disk.reserve", 4 << 20
PHASES_FILE = "phases.jsonl"
# Run folders this process holds: a `finish` inside a run (its interrupt) is the same writer, not a second one.
_HELD: set[Path] = set()
# An flock refused by a file system that has none (some network mounts): the folder runs unguarded.
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS})


def is_safe_name(name: object) -> bool:
    return isinstance(name, str) and SAFE_NAME.fullmatch(name) is not None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_name(name: object, what: str) -> str:
    """`name` as is, or ConfigError saying which name is not a plain folder or file name."""
    if not is_safe_name(name):
        raise ConfigError(f"{what}: {_shown(name)} is not a safe name ({SAFE_NAME_RULE})")
    return name  # type: ignore[return-value]


def storage_error(path: Path, e: OSError) -> EvalsuiteError:
    """A failed write as one line: the machine's fault (full disk, read-only) exits 4, others 1."""
    if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
        return ConfigError(LINKED.format(path=path))
    if e.errno == errno.ENXIO:  # a FIFO opened without blocking, nobody reading it
        return ConfigError(f"{path}: not a regular file (a FIFO); remove it (evalsuite writes its records there)")
    cls = StorageError if e.errno in STORAGE_ERRNOS else EvalsuiteError
    return cls(f"{path}: cannot write ({e.strerror or e}); records so far are kept, rerun with --resume "
               f"once it is fixed")


def _write_fd(path: Path, flags: int):
    """`path` opened for writing, where it is a regular file: opened without blocking (a FIFO planted there
    would wait for a reader forever) and checked on the open file."""
    fd = os.open(path, flags | os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK | _NOFOLLOW, 0o666)
    _regular(fd, path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "w")


def _regular(fd: int, path: Path) -> None:
    """Closes `fd` and refuses in one line where it is not a regular file."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{path}: not a regular file (a device, FIFO or socket); remove it (evalsuite writes its "
                          "records there)")


def _atomic_write(path: Path, text: str) -> None:
    """A temporary file of a fresh random name (created exclusively, so never a planted link),
    renamed over `path`: a rename replaces a link at `path` rather than writing through it."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise storage_error(path, e) from None


@functools.cache
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def new_run_id(stem: str) -> str:
    """UTC time to the second, then a random part (two runs started in the same second differ),
    then the config's name."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}.{secrets.token_hex(3)}-{run_stem(stem)}"


def run_stem(stem: str) -> str:
    """A config's file stem as its run ids end: characters a folder name should not hold become '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)


_STAMP = re.compile(r"^\d{8}-\d{6}(\.[0-9a-f]{6})?-")  # new_run_id's prefix


def run_name(run_id: str) -> str:
    """A run id without its leading time stamp: its config's stem, as new_run_id wrote it."""
    return _STAMP.sub("", run_id)


def check_output_dir(out: Path) -> Path:
    """A folder for run folders: an existing folder, or a path where one can be made."""
    if out.is_symlink() and not out.exists():
        raise ConfigError(f"--output-dir {out}: a symbolic link to nothing ({os.readlink(out)})")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output-dir {out}: not a folder")
    above = next((p for p in out.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():  # found before any work, not when the run folder is made
        raise ConfigError(f"--output-dir {out}: {above} is a file, not a folder; {FOLDER_HINT}")
    return out


def create_run_dir(output_dir: Path, stem: str) -> "RunDir":
    """A new, empty run folder of its own: created exclusively, so no other run shares it."""
    out = check_output_dir(Path(output_dir))
    try:
        out.mkdir(parents=True, exist_ok=True)
        for _ in range(8):  # a clash needs the same second and the same 24 random bits
            root = out / new_run_id(stem)
            try:
                root.mkdir()
                return RunDir(root)
            except FileExistsError:
                continue
    except OSError as e:
        said = f"--output-dir {out}: cannot make a run folder there ({e.strerror})"
        if e.errno in STORAGE_ERRNOS:  # the machine's refusal (full, read-only): exit 4
            raise StorageError(said) from None
        # a path no folder can be made at (through a file, under /proc): bad input
        hint = PATH_KIND_HINTS.get(e.errno) or FOLDER_HINT
        raise ConfigError(f"{said}; {hint}") from None
    raise EvalsuiteError(f"{out}: no free run folder name after 8 tries")


def _lock(path: Path) -> int:
    """The open lock file, flock'ed for this process, its holder written in; ConfigError naming the
    holder where another process has it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | _NOFOLLOW, 0o666)
    except OSError as e:
        raise storage_error(path, e) from None
    _regular(fd, path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise ConfigError(f"{path.parent}: in use by another evalsuite process ({holder}); wait for it to end "
                          f"or stop it, then rerun") from None
    except OSError as e:
        if e.errno not in _NO_LOCKS:
            os.close(fd)
            raise storage_error(path, e) from None
    return fd


def _holder(fd: int) -> str:
    """What the lock's holder wrote of itself; it writes just after taking the lock, so an empty
    file is read again for a moment."""
    for _ in range(20):
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if text:
            return text
        time.sleep(0.05)
    return "pid unknown"


def _drop_partial_line(path: Path) -> None:
    """A kill mid-write leaves a line without its newline; cut it so the next append starts clean."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK | _NOFOLLOW)
    except FileNotFoundError:
        return
    _regular(fd, path)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)


class RunDir:
    """A run folder. Every file it writes lies inside it: names are checked against SAFE_NAME, no
    folder on the way may be a symbolic link, and the file itself is never written through one."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def config_path(self) -> Path:
        """The resolved config the run was made with (config.yaml)."""
        return self.root / CONFIG_FILE

    def exists(self) -> bool:
        return (self.root / RUN_FILE).exists()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The folder to this process alone while the block runs: two processes writing it (two
        --resume, a finish beside a run) would interleave run.json, result.json and the samples.
        A second process is refused at once, naming the holder. The kernel drops an flock with its
        process, so a killed run leaves no stale lock; holds nested in one process are one hold."""
        key = self.root.resolve()
        if key in _HELD:
            yield
            return
        fd = _lock(self.inside(LOCK_FILE))
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
            os.close(fd)

    def reserve_space(self) -> None:
        """Claim RESERVE_BYTES on the run folder's disk, as blocks the file system has handed out (not a
        sparse file), so that they are there to give back once the disk is full."""
        path = self.inside(RESERVE_FILE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | _NOFOLLOW, 0o666)
            try:
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, RESERVE_BYTES)
                else:  # no fallocate (macOS): zeros, written
                    os.pwrite(fd, bytes(RESERVE_BYTES), 0)
            finally:
                os.close(fd)
        except OSError as e:
            raise storage_error(path, e) from None

    def release_space(self) -> None:
        """Give the reserve back: at the run's end, and first thing when a full disk stopped it."""
        try:
            self.inside(RESERVE_FILE).unlink(missing_ok=True)
        except OSError:
            pass

    def inside(self, *parts: str) -> Path:
        """root/parts..., refused when a part is not a plain name or a folder on the way is a link."""
        path = self.root
        for i, part in enumerate(parts):
            check_name(part, f"{self.root}: file name")
            if i < len(parts) - 1 and (path / part).is_symlink():
                raise ConfigError(LINKED.format(path=path / part))
            path = path / part
        return path

    def _folder(self, *parts: str) -> Path:
        path = self.inside(*parts, "x").parent  # every part checked as a folder on the way
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise storage_error(path, e) from None
        return path

    def write_text(self, name: str, text: str) -> None:
        """A file of the run folder itself, written whole or not at all."""
        self._folder()
        _atomic_write(self.inside(name), text)

    def write_config(self, resolved: dict[str, Any]) -> None:
        self.write_text(CONFIG_FILE, yaml.safe_dump(resolved, sort_keys=False))

    def read_config(self) -> dict[str, Any]:
        """The resolved config the run was made with; {} for a run folder without one. The keys that
        readers take from it are held to their types (RecordedConfig)."""
        path = self.config_path
        if not path.exists() and not path.is_symlink():
            return {}
        raw = read_regular(path, RECORD_BYTES, "YAML file")
        try:
            config = parse_yaml(path, raw, RECORD_DEPTH, "recorded config")
        except ConfigError as e:
            raise ConfigError(f"{e} (damaged? start a new run)") from None
        if not isinstance(config, dict):
            raise ConfigError(f"{path}: not a YAML mapping of config keys (damaged? start a new run)")
        _validated(path, RecordedConfig, config)
        return config

    def read_env(self) -> dict[str, Any]:
        """env.json: what the run ran on (library versions, CPU and GPU names); {} where it is missing."""
        env = self.read_json(ENV_FILE)
        _validated(self.root / ENV_FILE, RecordedEnv, env)
        return env

    def read_json(self, name: str) -> dict[str, Any]:
        """A JSON object file of the run folder itself; {} where it is missing."""
        path = self.inside(name)
        if not path.exists() and not path.is_symlink():
            return {}
        return _json_object(path, read_regular(path, RECORD_BYTES, "JSON record"))

    def write_env(self, env: dict[str, Any]) -> None:
        self.write_text(ENV_FILE, json.dumps(env, indent=2, default=str))

    def write_run(self, record: RunRecord) -> None:
        self.write_text(RUN_FILE, record.model_dump_json(indent=2))

    def load_run(self) -> RunRecord:
        path = self.root / RUN_FILE
        if not path.exists() and not path.is_symlink():
            raise ConfigError(f"{self.root}: not a run directory (no {RUN_FILE})")
        raw = read_regular(path, RECORD_BYTES, "JSON record")
        parsed = _json_object(path, raw)
        data = upgraded(parsed, str(path), run=True)
        if "variants" not in data:  # every run writes it, empty or not: without it the file was cut or edited
            raise ConfigError(f"{path}: no `variants` key: not a run record as evalsuite writes it (damaged or edited?)")
        record = _validated(path, RunRecord, raw if data is parsed else json.dumps(data).encode())
        for i, v in enumerate(record.variants):  # each names a folder that readers open
            check_name(v.variant, f"{path}: variants.{i}.variant")
            _check_metrics(path, v, f"variants.{i}.")
        return record

    def variant_dir(self, variant: str) -> Path:
        return self._folder(variant, SAMPLES_DIR).parent

    @contextlib.contextmanager
    def phase(self, name: str, variant: str | None = None, **extra: Any) -> Iterator[dict[str, Any]]:
        """Time the block as one span of the run, appended to phases.jsonl as it ends (raised or
        not: `ok` says which); the block may add keys to the dict it is given. Spans of engines
        side by side overlap: a reader takes their union for wall time."""
        row: dict[str, Any] = {"phase": name, **({"variant": variant} if variant else {}), **extra}
        row["start"], ok = time.time(), False
        try:
            yield row
            ok = True
        finally:
            row.update(end=time.time(), ok=ok)
            row["s"] = round(row["end"] - row["start"], 3)
            path = self.inside(PHASES_FILE)
            try:
                self._folder()
                with _write_fd(path, os.O_APPEND | os.O_CREAT) as f:  # one write a line: appends never interleave
                    f.write(json.dumps(row, default=str) + "\n")
            except OSError as e:
                if ok:  # never in place of what the block raised
                    raise storage_error(path, e) from None

    def load_phases(self) -> list[dict[str, Any]]:
        """Every span recorded so far, in the order they ended; a line a kill cut short is left out."""
        path = self.root / PHASES_FILE
        if not path.exists() and not path.is_symlink():
            return []
        rows = []
        for n, line in enumerate(read_regular(path, RECORD_BYTES, "JSON lines file").split(b"\n"), 1):
            with contextlib.suppress(ConfigError):
                row = parse_json(path, line, "phases line", n) if line.strip() else None
                if isinstance(row, dict) and "phase" in row:
                    rows.append(row)
        return rows

    def samples_path(self, variant: str, task: str) -> Path:
        """Where a task's samples are written; its folders are made."""
        return self._folder(variant, SAMPLES_DIR) / f"{check_name(task, 'task name')}{SAMPLES_SUFFIX}"

    def samples_dir(self, variant: str) -> Path:
        """A variant's folder of samples files, for reading: checks the name, creates nothing."""
        return self.root / check_name(variant, f"{self.root}: variant name") / SAMPLES_DIR

    def samples_file(self, variant: str, task: str) -> Path:
        """Where a task's samples are read from: checks the names, creates nothing."""
        return self.samples_dir(variant) / f"{check_name(task, f'{self.root}: task name')}{SAMPLES_SUFFIX}"

    def sample_files(self, variant: str) -> list[Path]:
        """The samples files a variant has recorded, by name."""
        return sorted(self.samples_dir(variant).glob(f"*{SAMPLES_SUFFIX}"))

    def engine_log(self, variant: str) -> Path:
        """Where the variant's engine writes its output; a link planted there is refused."""
        path = self.variant_dir(variant) / ENGINE_LOG
        if path.is_symlink():
            raise ConfigError(LINKED.format(path=path))
        return path

    def append_samples(self, variant: str, task: str, rows: list[dict[str, Any]]) -> None:
        """Append and fsync, so a killed run loses at most the batch in flight."""
        path = self.samples_path(variant, task)
        try:
            _drop_partial_line(path)
            with _write_fd(path, os.O_APPEND | os.O_CREAT) as f:
                for row in rows:
                    f.write(json.dumps(row, default=str) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise storage_error(path, e) from None

    def write_samples(self, variant: str, task: str, rows: list[dict[str, Any]]) -> None:
        """A task's every row at once, or none: a harness records its rows in one go (the capacity pass
        all its levels so far, after each), and a resume takes the rows as the whole task unless the task
        goes on from them (Task.resume), so a write cut short (a full disk, Ctrl-C) must leave no file
        rather than some of the rows."""
        text = "".join(json.dumps(row, default=str) + "\n" for row in rows)
        _atomic_write(self.samples_path(variant, task), text)

    def load_samples(self, variant: str, task: str, first: int | None = None) -> list[dict[str, Any]]:
        """Rows written so far (the `first` ones only, if given), each a SampleLine (as a dict, keys as
        written); the last line, when a kill cut it short, is dropped (it is redone). A sample id counts
        once. Creates nothing."""
        path = self.samples_file(variant, task)
        if not path.exists() and not path.is_symlink():
            return []
        return _sample_rows(path, read_regular(path, SAMPLES_BYTES, SAMPLES_KIND).split(b"\n"), 1, set(), first)

    def follow_samples(self, variant: str, task: str) -> SamplesTail:
        """A reader of the task's samples as they are appended (load_samples, a batch at a time)."""
        return SamplesTail(self.samples_file(variant, task))

    def write_result(self, result: VariantResult) -> None:
        _atomic_write(self.variant_dir(result.variant) / RESULT_FILE, result.model_dump_json(indent=2))

    def load_result(self, variant: str) -> VariantResult | None:
        path = self.root / check_name(variant, f"{self.root}: variant name") / RESULT_FILE
        if not path.exists() and not path.is_symlink():
            return None
        result = read_result(path)
        if result.variant != variant:
            raise ConfigError(f"{path}: variant: {_shown(result.variant)} where its folder is {variant!r} (moved or "
                              "edited?)")
        return result


SAMPLES_KIND = "samples file (JSON lines)"


def _sample_rows(path: Path, lines: list[bytes], at: int, seen: set[str], first: int | None = None) -> list[dict]:
    """The SampleLines among `lines` (the first numbered `at` in the file) whose ids are not in `seen`
    (which gains them); an unparsable last one was cut short by a kill and is dropped (it is redone)."""
    rows: list[dict] = []
    for n, line in enumerate(lines, at):
        if not line.strip():
            continue
        try:
            row = SampleLine.model_validate_json(line, strict=True)
        except ValidationError as e:
            if n == at + len(lines) - 1 and e.errors()[0]["type"] == "json_invalid":
                continue  # cut short by a kill: no newline after it
            raise ConfigError(_refusal(path, SampleLine, e, line, n)) from None
        parse_json(path, line, SAMPLES_KIND, n)  # each key once, integers bounded
        if not math.isfinite(row.score.value):
            raise ConfigError(f"{path}: line {n}: score.value: {row.score.value} is not a score (allowed: a finite "
                              "number, 1 right, 0 wrong)")
        if row.sample.id in seen:
            continue  # never count a sample twice
        seen.add(row.sample.id)
        rows.append(row.model_dump(exclude_unset=True))
        if first is not None and len(rows) >= first:
            break
    return rows


class SamplesTail:
    """A samples file read as it grows: `new()` validates only the whole lines appended since the last
    call, as load_samples would, so a reader that looks after every batch reads each line once. A file
    that shrank below what was read (replaced, not appended to) is read again from its start."""

    def __init__(self, path: Path):
        self.path, self.offset, self.line, self.seen = path, 0, 1, set()

    def new(self) -> tuple[list[dict], bool]:
        """(rows not returned before, whether the file was read again from its start)."""
        if not self.path.exists() and not self.path.is_symlink():
            return [], False
        again = self.path.stat().st_size < self.offset
        if again:
            self.offset, self.line, self.seen = 0, 1, set()
        data = read_regular(self.path, SAMPLES_BYTES, SAMPLES_KIND, self.offset)
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits for its newline
        lines = whole.split(b"\n")[:-1]
        # the empty piece after the last newline stands where load_samples sees one: a whole line that
        # is not JSON is an error here too, never taken for one cut short
        rows = _sample_rows(self.path, [*lines, b""], self.line, self.seen) if lines else []
        self.offset, self.line = self.offset + len(whole), self.line + len(lines)
        return rows, again


# Run records are read as data whoever wrote them: a regular file of bounded size, strict types (no
# "1" taken for 1), nesting bounded by pydantic's JSON parser (255 levels: a deeper record is refused
# before any code recurses into it), and one line naming the file, line and key where they are wrong.
RECORD_BYTES = 256 << 20  # run.json, result.json, env.json, config.yaml: kB to a few MB
SAMPLES_BYTES = 16 << 30  # 128K-token prompts recorded as token ids: hundreds of MB per task
RECORD_DEPTH = 64  # config.yaml (read by PyYAML, which has no bound of its own)


def _json_object(path: Path, raw: bytes) -> dict[str, Any]:
    """A record file's JSON object; anything else is one ConfigError line naming the file."""
    if _binary(raw):
        raise ConfigError(f"{path}: not a JSON record (binary content)")
    data = parse_json(path, raw)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON record (a {type(data).__name__}, not an object)")
    return data


def read_result(path: Path) -> VariantResult:
    """A variant's result.json (this version's or an earlier one), read as data."""
    return parse_result(path, read_regular(path, RECORD_BYTES, "JSON record"))


def parse_result(path: Path, raw: bytes) -> VariantResult:
    """read_result of bytes already read (from `path`)."""
    parsed = _json_object(path, raw)
    data = upgraded(parsed, str(path), run=False)
    result = _validated(path, VariantResult, raw if data is parsed else json.dumps(data).encode())
    _check_metrics(path, result)
    return result


def _check_metrics(path: Path, result: VariantResult, at: str = "") -> None:
    """What a metric's numbers must be where they are read: a count of items is a count (>= 0), a value and
    its standard error a number or NaN (a score over no items), never infinite."""
    for i, m in enumerate(result.metrics):
        key = f"{at}metrics.{i}"
        if m.n is not None and m.n < 0:
            raise ConfigError(f"{path}: {key}.n: {m.n} is not a number of items (allowed: 0 or more)")
        for name, value in (("value", m.value), ("stderr", m.stderr), *(("ci95", v) for v in m.ci95 or [])):
            if value is not None and math.isinf(value):
                raise ConfigError(f"{path}: {key}.{name}: {value} (allowed: a finite number, or NaN for no items)")


def _validated(path: Path, model: type[M], data: bytes | dict[str, Any], strict: bool = True) -> M:
    """`data` (a file's bytes, or a mapping already parsed) as `model`, with strict types."""
    try:
        if isinstance(data, bytes):
            return model.model_validate_json(data, strict=strict)
        return model.model_validate(data, strict=strict)
    except ValidationError as e:
        raise ConfigError(_refusal(path, model, e, data if isinstance(data, bytes) else b"")) from None


def _binary(raw: bytes) -> str | None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "binary content"
    return None


def _refusal(path: Path, model: type[BaseModel], e: ValidationError, raw: bytes = b"", line: int | None = None) -> str:
    """One line: the file, the line (of a samples file, or of a JSON syntax error), the key and what is wrong."""
    err = e.errors(include_url=False, include_input=False)[0]
    at = f"line {line}: " if line is not None else ""
    if err["type"] == "json_invalid":
        return f"{path}: {at}not JSON ({_binary(raw) or err['msg'].removeprefix('Invalid JSON: ')})"
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{path}: {at}not a valid {model.__name__}: {key}: {err['msg']}"
