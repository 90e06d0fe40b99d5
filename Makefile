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

.PHONY: setup demo test lint clean

setup: $(STAMP)

# --no-compile: no bytecode for the whole of every package at install time (measured here: 17 s
# against 7 s for the edge runtimes alone); Python compiles what is imported, when it is.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile

$(STAMP): pyproject.toml constraints.txt litert-stack.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) "$(TORCH)"
	$(PIP) -c constraints.txt -e '.[dev]'
	# LiteRT without dependency resolution: litert-stack.txt says why.
	$(PIP) --no-deps -c constraints.txt -r litert-stack.txt
	touch $(STAMP)

demo: setup
	$(VENV)/bin/dse run experiments/quickstart.yaml

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf experiments/runs experiments/dashboards/*.html
