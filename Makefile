# The two commands of the README:
#   make repro   set up .venv if needed, then run the whole pipeline (dvc repro)
#   make test    set up .venv with the dev extras if needed, then ruff + pytest
#   make test-fast   the same without the tests marked slow (the everyday loop)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION := 2.13.0
# Stage commands in dvc.yaml call `bert`; put the venv first on PATH for them.
export PATH := $(abspath $(VENV))/bin:$(PATH)
# pytest's workers (pytest-xdist): one per CPU, at most 4 (beyond that the longest file, the
# pipeline's, sets the wall time). A worker takes one test file at a time (its module fixtures
# built once), in the order tests/conftest.py gives: the slow files first.
# `make test TEST_WORKERS=0`: all in one process.
TEST_WORKERS ?= $(shell python3 -c "import os; print(min(4, os.cpu_count() or 1))")
PYTEST := $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: install install-dev repro test test-fast lint bench clean-outputs plots-page dev-tools

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev plots/page.html

$(PY):
	python3 -m venv $(VENV)

# torch first, chosen by the machine: the CUDA build where an NVIDIA GPU answers, else the
# CPU build (a bare `torch` requirement would pull a multi-GB CUDA build onto a CPU box).
$(VENV)/.torch: | $(PY)
	@if $(PY) -c "import torch, sys; sys.exit(not torch.__version__.startswith('$(TORCH_VERSION)'))" 2>/dev/null; then \
	  echo "torch $(TORCH_VERSION) already installed"; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(PIP) install "torch==$(TORCH_VERSION)"; \
	else \
	  $(PIP) install "torch==$(TORCH_VERSION)+cpu" 2>/dev/null \
	  || $(PIP) install "torch==$(TORCH_VERSION)+cpu" --extra-index-url https://download.pytorch.org/whl/cpu \
	  || $(PIP) install "torch==$(TORCH_VERSION)"; \
	fi
	@touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PIP) install -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.torch
	$(PIP) install -e ".[dev]"
	@touch $@ $(VENV)/.installed

# `dvc plots show`/`diff` drawing their charts with no network: Vega's scripts from npm
# (plots/package-lock.json) inlined into the page's template, which .dvc/config.local names.
plots-page: plots/page.html
plots/page.html: plots/package-lock.json plots/page.py | dev-tools $(VENV)/.installed
	npm ci --prefix plots --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PY) plots/page.py
	$(VENV)/bin/dvc config --local plots.html_template ../plots/page.html

# npm for the page, and Debian's chromium, in which tests/test_plots_page.py draws it: installed
# with apt where missing and we are root on Debian; else named here, and that test fails.
dev-tools:
	@missing="$$(for t in npm chromium; do command -v $$t >/dev/null || echo $$t; done)"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	elif [ -n "$$missing" ]; then echo "not installed (apt-get install them):" $$missing; fi

repro: install
	$(VENV)/bin/dvc repro

test: install-dev
	$(VENV)/bin/ruff check .
	$(PYTEST)

test-fast: install-dev
	$(VENV)/bin/ruff check .
	$(PYTEST) -m "not slow"

lint: install-dev
	$(VENV)/bin/ruff check .

bench: install-dev
	$(PY) benchmarks/data_pipeline.py --quick
	$(PY) benchmarks/model_step.py --quick
	$(PY) benchmarks/collate.py
