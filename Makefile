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
# 21.2 min with two) and loads the machine more. Each worker computes on its own share of the CPUs
# (tests/conftest.py, worker_cpus): the whole suite, -n 2 on a 2-core Xeon, 1,222 s unpinned, 957 pinned.
TEST_WORKERS ?= 2

LAB_PROFILE ?= smoke

# --- installing ----------------------------------------------------------------------------------
#   make setup                   uv when it is on the PATH or in .venv; otherwise pip installs uv's
#                                pinned release into .venv first, and plain pip is the fallback
#   make setup INSTALLER=pip     pip only (the slower way: about 3x the minutes, README)
#   make setup WHEELS=DIR        offline, from a folder that `make wheelhouse` filled (--no-index)
#   make wheelhouse PLATFORM=P   every wheel platform P needs, into WHEELHOUSE (build/wheels/P):
#                                P is linux-x86_64, linux-aarch64, macos-arm64 or windows-x86_64
INSTALLER ?= auto
WHEELS ?=
PLATFORM ?= $(shell uname -s | tr A-Z a-z | sed 's/darwin/macos/')-$(shell uname -m | sed 's/amd64/x86_64/')
WHEELHOUSE ?= build/wheels/$(PLATFORM)
UV_PIN = $(shell sed -n 's/^uv==\([^ ;#]*\).*/\1/p' requirements-cpu.txt)
TORCH_PIN = $(shell sed -n 's/^torch==\([^ ;#]*\).*/\1/p' requirements-cpu.txt)
# PyTorch's CPU-only wheels. On Linux, PyPI's torch is the CUDA build: 527 MB plus 2.2 GB of
# nvidia-*, cuda-* and triton wheels that the CPU track never loads; the CPU build is 192 MB. Linux
# installs take torch from here (alone, --no-deps: everything else comes from PyPI) when it answers
# within 5 s; TORCH_INDEX= turns that off. Where it does not answer (a network that reaches PyPI
# only), pip's own configuration decides: a find-links folder with the CPU wheel, or PyPI's CUDA build.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# uv installs without byte-compiling (pip compiles by default): --compile-bytecode writes every
# package's .pyc once, at install, about a minute on 2 cores. Without them, each Python process
# compiles what it imports from source, every time, where PYTHONDONTWRITEBYTECODE is set (as in
# containers and CI) and keeps nothing: diffusers with torch, OpenVINO and NNCF took 12.1 CPU s to
# import, 5.9 with the .pyc files, and the test suite starts hundreds of such processes
# (tests/integration/test_bench_memory.py, eight children: 105 CPU s, 61 with them).
# uv reads no pip configuration: it is handed the find-links folders and constraint files that pip's
# configuration names (`pip config list`: its files and PIP_* variables), so that both installers
# see the same wheels (a folder holding the CPU torch, say), and uv never fetches PyPI's CUDA torch
# where pip would not.
PIP_FROM_CONFIG = $(PY) -m pip config list 2>/dev/null | awk -F= '/^[^=]*[.](find-links|constraint)=/ { \
	  key = substr($$1, index($$1, ".") + 1); value = substr($$0, length($$1) + 2); gsub("\047", "", value); \
	  n = split(value, each, " "); for (i = 1; i <= n; i++) if (!seen[key each[i]]++) printf " --%s %s", key, each[i] }'
TORCH_ANSWERS = [ "$$(uname -s)" = Linux ] && [ -n "$(TORCH_INDEX)" ] && $(PY) -c \
	"import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=5)" \
	"$(TORCH_INDEX)" 2>/dev/null

.PHONY: setup wheelhouse run run-full hub-cache rehearsal lab test lint clean

setup: $(STAMP)

$(STAMP): requirements-cpu.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "Need $(PYTHON) (set PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@set -e; \
	if [ -n "$(WHEELS)" ]; then source="--no-index --find-links $(abspath $(WHEELS))"; else source=""; fi; \
	uv=""; \
	if [ "$(INSTALLER)" != pip ]; then \
	  uv=$$(command -v uv || true); \
	  if [ -z "$$uv" ] && [ -x $(VENV)/bin/uv ]; then uv=$(VENV)/bin/uv; fi; \
	  if [ -z "$$uv" ] && $(PY) -m pip install -q $$source uv==$(UV_PIN); then uv=$(VENV)/bin/uv; fi; \
	  if [ -z "$$uv" ]; then echo "uv unavailable: installing with pip"; fi; \
	fi; \
	if [ -n "$$uv" ]; then \
	  install="$$uv pip install --python $(PY) --compile-bytecode $$source $$($(PIP_FROM_CONFIG))"; \
	else \
	  [ -n "$(WHEELS)" ] || $(PY) -m pip install -q --upgrade pip; \
	  install="$(PY) -m pip install -q $$source"; \
	fi; \
	if [ -z "$(WHEELS)" ] && $(TORCH_ANSWERS); then \
	  echo "torch: the CPU build from $(TORCH_INDEX)"; \
	  $$install --no-deps --index-url $(TORCH_INDEX) torch==$(TORCH_PIN); \
	fi; \
	echo "$$install -r requirements-cpu.txt -e ."; \
	$$install -r requirements-cpu.txt -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (sdaccel)" >/dev/null
	$(PY) -m sdaccel.tools.toys.random_checkpoints build/checkpoints
	touch $(STAMP)

# uv resolves for the target (its markers, not this machine's: pip download --platform would keep
# libtpu for macOS); pip downloads exactly that list, with this machine's pip configuration, plus
# the build backend that `pip install -e .` needs offline. The folder's requirements.txt is the list.
# pip expands a macOS --platform to the older releases, but not manylinux_2_NN: each is named.
wheelhouse: setup
	@set -e; mkdir -p $(WHEELHOUSE); \
	manylinux() { for minor in $$(seq $$2 -1 5); do printf -- ' --platform manylinux_2_%s_%s' $$minor $$1; done; \
	  for legacy in manylinux2014 manylinux2010 manylinux1; do printf -- ' --platform %s_%s' $$legacy $$1; done; }; \
	case "$(PLATFORM)" in \
	  linux-x86_64)   target=x86_64-manylinux_2_31;  tags=$$(manylinux x86_64 31) ;; \
	  linux-aarch64)  target=aarch64-manylinux_2_35; tags=$$(manylinux aarch64 35) ;; \
	  macos-arm64)    target=aarch64-apple-darwin;   tags="--platform macosx_14_0_arm64" ;; \
	  windows-x86_64) target=x86_64-pc-windows-msvc; tags="--platform win_amd64" ;; \
	  *) echo "PLATFORM=$(PLATFORM): one of linux-x86_64 linux-aarch64 macos-arm64 windows-x86_64"; exit 2 ;; \
	esac; \
	torch=""; extra=""; \
	case "$(PLATFORM)" in linux-*) if $(TORCH_ANSWERS); then torch="--torch-backend cpu"; extra="--extra-index-url $(TORCH_INDEX)"; fi ;; esac; \
	sed -n 's/^requires = \[\(.*\)\].*/\1/p' pyproject.toml | tr -d '" ' | tr , '\n' > $(WHEELHOUSE)/build-requirements.in; \
	MACOSX_DEPLOYMENT_TARGET=14.0 $(VENV)/bin/uv pip compile -q --no-header --no-annotate \
	  --python-platform $$target --python-version 3.11 $$torch $$($(PIP_FROM_CONFIG)) \
	  requirements-cpu.txt $(WHEELHOUSE)/build-requirements.in -o $(WHEELHOUSE)/requirements.txt; \
	$(PY) -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.11 \
	  $$tags $$extra --dest $(WHEELHOUSE) -r $(WHEELHOUSE)/requirements.txt; \
	echo "$(WHEELHOUSE): $$(ls $(WHEELHOUSE)/*.whl | wc -l) wheels, $$(du -sh $(WHEELHOUSE) | cut -f1)"

run: setup
	$(PY) -m sdaccel.tools.workshop.run_notebooks --profile smoke

run-full: setup
	$(PY) -m sdaccel.tools.workshop.run_notebooks --profile full

# The full profile rehearsed at real size with no network: the hub stand-in (the notebooks' hub ids,
# real architectures and files, random weights: about 12 GB), then every notebook in the rehearsal
# profile into build/rehearsal/ (a benchmark, not a test: hours on 2 cores). Wall time and peak
# memory per notebook: build/rehearsal/summary.md and summary.json. Before it,
# `python -m sdaccel.tools.workshop.doctor --profile rehearsal` says what is missing from the stand-in.
HF_STAND_IN ?= build/hf-home
hub-cache: setup
	$(PY) -m sdaccel.tools.workshop.hub_cache $(HF_STAND_IN)

rehearsal: hub-cache
	SDACCEL_HF_STAND_IN=$(abspath $(HF_STAND_IN)) $(PY) -m sdaccel.tools.workshop.run_notebooks --profile rehearsal --keep-going

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
	$(PY) -m sdaccel.tools.workshop.docs_site --from $(DOCS_FROM) --out build/docs

attendee: setup
	$(PY) -m sdaccel.course.exercises strip notebooks build/attendee

doctor: setup
	$(PY) -m sdaccel.tools.workshop.doctor --profile smoke --json build/doctor.json

clean:
	rm -rf build .pytest_cache
