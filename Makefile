# history-proxy: `make run` serves the proxy on config/default.yaml (`make run PORT=9000`), `make test` runs every test.
# Both create .venv on first use; later runs reinstall only when pyproject.toml changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8080
ARGS ?=

.PHONY: run test lint readme docs-figures install install-dev clean

run: $(VENV)/.installed-test
	$(BIN)/history-proxy serve --host $(HOST) --port $(PORT) $(ARGS)

test: $(VENV)/.installed-test
	@echo "make test: pytest over tests/ in .venv; the optional parts it builds or skips are listed below"
	$(BIN)/python -m pytest $(ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check history_proxy tests bench scripts
	$(BIN)/ruff format --check history_proxy tests bench scripts
	$(BIN)/mypy

docs-figures: $(VENV)/.installed-test  # the figures docs/ quotes, computed again (tests/test_docs.py fails when they drift)
	$(BIN)/python scripts/docs_figures.py

readme:  # the filter tables of README.md and docs/filters/README.md, from docs/filters/<type>.md
	python3 scripts/build_readme.py

install: $(VENV)/.installed-test

install-dev: $(VENV)/.installed-dev

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
