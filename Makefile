# Quick start: `make demo` and `make test`. Both set up .venv on their own.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench-core clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,lab]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) demo/showcase.py

test: lint typecheck unit

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests demo scripts
	$(VENV)/bin/ruff format --check src tests demo scripts

typecheck: $(STAMP)
	$(VENV)/bin/mypy src tests demo scripts

unit: $(STAMP)
	$(VENV)/bin/pytest

# The figures quoted in the README for the core (pool fairness, gate wake-up).
bench-core: $(STAMP)
	$(PY) scripts/bench_core.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
