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

.PHONY: install install-dev repro test test-fast lint bench clean-outputs

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

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
