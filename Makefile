# Two commands set everything up on a fresh machine:
#   make run   - install if needed, then execute the whole collection and write nogradlab-run/report.html
#   make test  - install if needed, then run every test (unit tests, notebooks via nbval and papermill)
# Against another PyTorch release, in its own cached venv (.venv-torch2.9.1; several GB the first time):
#   make test TORCH=2.9.1                     # or: make run TORCH=2.9.1, make claims TORCH=2.9.1
#   make test TORCH=2.9.1 PYTHON=python3.12   # another Python too: .venv-torch2.9.1-py3.12
PYTHON ?= python3
VENV   ?= .venv
DEVICE ?= auto
SCALE  ?= auto
OUT    ?= nogradlab-run
PYTEST_ARGS ?=
# make test's processes (pytest-xdist; 0: one process). auto: one per core, at most TEST_MAX_WORKERS
TEST_WORKERS ?= auto
TEST_MAX_WORKERS ?= 4

# torch -> torchvision, as PyTorch's compatibility table pairs them (torchvision's README): for torch
# 2.x the torchvision minor is torch's minor + 15, the patch the same. TORCHVISION=... overrides it.
TORCHVISION_PAIRS := 2.4.0:0.19.0 2.4.1:0.19.1 2.5.0:0.20.0 2.5.1:0.20.1 2.6.0:0.21.0 2.7.0:0.22.0 \
  2.7.1:0.22.1 2.8.0:0.23.0 2.9.0:0.24.0 2.9.1:0.24.1 2.10.0:0.25.0 2.11.0:0.26.0 2.12.0:0.27.0 \
  2.12.1:0.27.1 2.13.0:0.28.0 2.14.0:0.29.0 2.14.1:0.29.1
TORCH ?=
ifneq ($(TORCH),)
TORCHVISION ?= $(patsubst $(TORCH):%,%,$(filter $(TORCH):%,$(TORCHVISION_PAIRS)))
ifeq ($(TORCHVISION),)
$(error TORCH=$(TORCH): no torchvision known for it; add it to TORCHVISION_PAIRS or pass TORCHVISION=...)
endif
ifneq ($(filter command environment,$(origin PYTHON)),)
PYSUFFIX := -py$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
endif
VENV := .venv-torch$(TORCH)$(PYSUFFIX)
TORCH_PINS := 'torch==$(TORCH)' 'torchvision==$(TORCHVISION)'
endif
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lab claims install browser clean bench lint unit book

# (Re)install when the venv is missing or pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing nogradlab and its dependencies into $(VENV) (first time: about 2-3 minutes, ~6 GB)..."
	@# setuptools: `python3 -m venv` seeds an old one (65 on Python 3.11) that predates the SPDX
	@# `license = "MIT"` form; tests/project/test_packaging.py builds the metadata with the venv's own.
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=77'
	$(PY) -m pip install --quiet -e '.[dev]' $(TORCH_PINS)
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $(STAMP)

install: $(STAMP)

# Headless Chromium (Debian's package) for the report and JupyterLab browser tests.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  ( echo "Installing Debian's chromium for the browser tests..." && \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ) || \
	  echo "warning: could not install chromium; browser tests will be skipped"

run: install
	NOGRADLAB_FROM_MAKE=1 $(PY) -m nogradlab run --device $(DEVICE) --scale $(SCALE) --out $(OUT)

claims: install
	$(PY) -m nogradlab claims --device $(DEVICE) --scale $(SCALE)

test: install browser
	$(PY) -m pytest -n $(TEST_WORKERS) --maxprocesses=$(TEST_MAX_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The tests that need no notebook kernel, no browser and no GPU, each well under a second (markers:
# tests/conftest.py; a slower test is marked integration at the test), on make test's processes.
unit: install
	$(PY) -m pytest -m unit -n $(TEST_WORKERS) --maxprocesses=$(TEST_MAX_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Lint: ruff on the package, tests, benchmarks and scripts; the five wings' layers contract (import-linter,
# pyproject.toml [tool.importlinter]: core <- estimate <- lab <- claims <- run); ruff through nbQA on the notebooks; the
# notebooks stored without outputs (nbstripout, with the options of the git filter `make lab` sets).
# The same hooks run from .pre-commit-config.yaml (`pre-commit install`). LINT_FORMAT=1 also checks
# `ruff format` (not switched on yet: the code base is not formatted with it).
LINT_PATHS  := nogradlab tests benchmarks scripts
LINT_FORMAT ?= 0
NBSTRIPOUT_ARGS := --keep-id --extra-keys 'metadata.papermill cell.metadata.papermill'
lint: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/nbqa ruff notebooks
	$(VENV)/bin/nbstripout --verify $(NBSTRIPOUT_ARGS) notebooks/*.ipynb || \
	  { echo "notebooks stored with outputs: run nbstripout $(NBSTRIPOUT_ARGS) notebooks/*.ipynb" >&2; exit 1; }
ifeq ($(LINT_FORMAT),1)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/nbqa 'ruff format' --check notebooks
endif

# The book: a static site of the executed notebooks with the report as its front page (Sphinx, myst-nb,
# Furo; offline). Built from the run in $(OUT), which `make run` makes first when it holds none.
BOOK_OUT ?= book/_build
book: install
	@test -f $(OUT)/report.html -a -d $(OUT)/notebooks || $(MAKE) run
	$(PY) scripts/book.py --run $(OUT) --out $(BOOK_OUT)

# JupyterLab on the notebooks. As root (containers, cloud VMs, dev containers) Jupyter refuses to start
# without --allow-root, so it is added then. In a git checkout, nbstripout is installed as this clone's git
# filter first, so that notebooks saved with outputs are committed without them.
LAB_ARGS ?=
lab: install
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  $(VENV)/bin/nbstripout --install --attributes .gitattributes && \
	  git config filter.nbstripout.clean "'$(abspath $(PY))' -m nbstripout --keep-id" && \
	  git config diff.ipynb.textconv "'$(abspath $(PY))' -m nbstripout --keep-id -t" && \
	  git config filter.nbstripout.extrakeys "metadata.papermill cell.metadata.papermill" && \
	  echo "nbstripout: notebook outputs are stripped on commit in this clone (cell ids kept)"; fi
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS) notebooks/00_index.ipynb

# Speed and memory targets live here, not in the tests: the learner's-session budgets (each notebook,
# claims, run; peak RSS; each notebook in a 1.0 GB memory cgroup, as root) beside this machine's figures,
# then the measurement core's own benchmark.
BENCH_ARGS ?= --make-run --widget --estimate --unit --memory-limit 1e9
bench: install
	$(PY) benchmarks/session.py $(BENCH_ARGS)
	$(PY) benchmarks/probes.py
	$(PY) benchmarks/budget_slider.py

# The run's folder only when nogradlab made it (setuptools' build/ and anything else are left alone).
clean:
	@if [ -d $(OUT) ]; then if [ -f $(OUT)/.nogradlab-build ]; then rm -rf $(OUT); \
	  else echo "kept $(OUT): not made by nogradlab run"; fi; fi
	rm -rf .pytest_cache test-artifacts book/_build
