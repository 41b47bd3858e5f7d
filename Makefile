# Two commands set everything up on a fresh machine:
#   make run   - install if needed, then execute the whole collection and write build/report.html
#   make test  - install if needed, then run every test (unit tests, notebooks via nbval and papermill)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEVICE ?= auto
SCALE  ?= auto
OUT    ?= build
PYTEST_ARGS ?=

.PHONY: run test lab claims install browser clean bench

# (Re)install when the venv is missing or pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing nogradlab and its dependencies into $(VENV) (first time: about 2-3 minutes, ~6 GB)..."
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
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
	$(PY) -m nogradlab run --device $(DEVICE) --scale $(SCALE) --out $(OUT)

claims: install
	$(PY) -m nogradlab claims --device $(DEVICE) --scale $(SCALE)

test: install browser
	$(PY) -m pytest $(PYTEST_ARGS)

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
# claims, run; peak RSS) beside this machine's figures, then the measurement core's own benchmark.
BENCH_ARGS ?= --make-run
bench: install
	$(PY) benchmarks/session.py $(BENCH_ARGS)
	$(PY) benchmarks/probes.py

clean:
	rm -rf build .pytest_cache test-artifacts
