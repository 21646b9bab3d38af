# The two commands of the README:
#   make run    create .venv, install everything, build the tiny checkpoints, and execute every
#               notebook in the smoke profile (executed copies in build/smoke/)
#   make test   the whole test suite (it sets up .venv first when needed)
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup run run-full test lint clean

setup: $(STAMP)

$(STAMP): requirements-cpu.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "Need $(PYTHON) (set PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-cpu.txt -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (sdaccel)" >/dev/null
	$(PY) -m sdaccel.tiny build/checkpoints
	touch $(STAMP)

run: setup
	$(PY) -m sdaccel.run_notebooks --profile smoke

run-full: setup
	$(PY) -m sdaccel.run_notebooks --profile full

test: setup
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks notebooks
	$(VENV)/bin/ruff format --check src tests benchmarks notebooks

clean:
	rm -rf build .pytest_cache
