# The two commands of the README:
#   make run    create .venv, install everything, build the tiny checkpoints, and execute every
#               notebook in the smoke profile (executed copies in build/smoke/)
#   make test   the whole test suite on TEST_WORKERS parallel workers (it sets up .venv first when needed)
#   make lab    JupyterLab on notebooks/ in the smoke profile (8 simulated devices, the tiny checkpoints);
#               LAB_PROFILE=full for the real models
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# pytest-xdist workers for make test (each worker loads its own JAX, PyTorch and OpenVINO). On two
# cores a third worker did not pay (.ci/run on a fresh clone: 19.5 and 21.0 min with three, 19.3 and
# 21.2 min with two) and loads the machine more.
TEST_WORKERS ?= 2

LAB_PROFILE ?= smoke

.PHONY: setup run run-full lab test lint clean

setup: $(STAMP)

$(STAMP): requirements-cpu.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "Need $(PYTHON) (set PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-cpu.txt -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (sdaccel)" >/dev/null
	$(PY) -m sdaccel.toy.random_checkpoints build/checkpoints
	touch $(STAMP)

run: setup
	$(PY) -m sdaccel.course.run_notebooks --profile smoke

run-full: setup
	$(PY) -m sdaccel.course.run_notebooks --profile full

# the kernel environment and each notebook's overrides come from src/sdaccel/course/run_profiles.py
lab: setup
	$(PY) -m sdaccel.course.run_profiles lab --profile $(LAB_PROFILE)

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=25

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks notebooks
	$(VENV)/bin/ruff format --check src tests benchmarks notebooks
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The workshop kit: the documentation site from executed notebooks, and the attendees' notebooks.
DOCS_FROM ?= build/smoke
.PHONY: docs attendee doctor

docs: setup
	$(PY) -m sdaccel.course.docs_site --from $(DOCS_FROM) --out build/docs

attendee: setup
	$(PY) -m sdaccel.course.exercises strip notebooks build/attendee

doctor: setup
	$(PY) -m sdaccel.course.doctor --profile smoke --json build/doctor.json

clean:
	rm -rf build .pytest_cache
