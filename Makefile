# Two commands do all the setup: `make demo` (install + the CPU smoke run) and `make test`.
.PHONY: setup demo test bench

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/evalsuite run configs/cpu-smoke.yaml

test: setup
	.venv/bin/python -m pytest -q -p no:cacheprovider

bench: setup
	.venv/bin/python bench/memory_prediction.py
