# history-proxy. `make help` lists every target with its time and what it downloads.
# Targets create .venv on first use; later runs reinstall only when pyproject.toml changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8080
MOCK ?= 1
ARGS ?=
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.DEFAULT_GOAL := help
.PHONY: help run demo test lint readme docs-figures install install-dev wheel clean

help:  ## this list
	@echo "make TARGET   (first run of a target builds .venv; times are a cold start on a laptop)"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: $(VENV)/.installed-serve  ## serve the default config on http://127.0.0.1:8080/v1 from the built-in mock (MOCK=0: the real providers; PORT=9000); ~40 s first time, downloads the 13 serving packages (~100 MB)
	$(BIN)/history-proxy serve --host $(HOST) --port $(PORT) $(if $(filter 1,$(MOCK)),--mock) $(ARGS)

demo: $(VENV)/.installed-serve  ## send a recorded agent conversation through the running proxy (`make run` in another terminal) as each role: tokens, cost, evidence kept, unfiltered vs shaped; writes demo.html; ~5 s, downloads nothing more
	$(BIN)/history-proxy demo --url http://$(HOST):$(PORT) $(ARGS)

test: $(VENV)/.installed-test  ## every test; 20-30 min on 2 cores (an estimate: the whole suite is not timed here). Downloads the test tools (~240 MB into .venv) and, in the tests that need them, AutoGen+CrewAI (.venv-frameworks, ~1 GB), Arize Phoenix (.venv-phoenix), the Codex and Claude Code CLIs (npm, .npm-clients); builds a container image (podman); uses nginx, redis-server, chromium, prometheus and kubectl when installed (each such test skips with the reason when its part is missing; .ci/run installs them all)
	@echo "make test: pytest over tests/ in .venv; the optional parts it builds or skips are listed below"
	$(BIN)/python -m pytest $(ARGS)

lint: $(VENV)/.installed-dev  ## ruff check, ruff format --check, mypy strict; ~1 min, downloads ruff and mypy
	$(BIN)/ruff check history_proxy tests bench scripts
	$(BIN)/ruff format --check history_proxy tests bench scripts
	$(BIN)/mypy

docs-figures: $(VENV)/.installed-test  ## recompute the figures docs/ quotes (tests/test_docs.py fails when they drift); ~2 min
	$(BIN)/python scripts/docs_figures.py

readme:  ## rebuild the filter tables of README.md and docs/filters/README.md from docs/filters/<type>.md; 1 s, no venv
	python3 scripts/build_readme.py

wheel: $(VENV)/.installed-serve  ## build dist/history_proxy-VERSION-py3-none-any.whl (only it, no dependency wheels); ~10 s, downloads the pinned setuptools
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w dist .

install: $(VENV)/.installed-serve  ## .venv with what serving needs (what `make run` uses); ~40 s, ~100 MB

install-dev: $(VENV)/.installed-dev  ## .venv with the test and lint tools too; ~1.5 min, ~300 MB

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-serve: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test]'
	touch $@ $(VENV)/.installed-serve

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test,dev]'
	touch $@ $(VENV)/.installed-test $(VENV)/.installed-serve

clean:  ## remove .venv and the tools' caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
