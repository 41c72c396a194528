# The two set-up commands of the README: `make demo` and `make test`. Both install exactly the
# versions (and file hashes) of requirements.lock; `make lock` refreshes it (docs/reproducibility.md).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/pip install --quiet --disable-pip-version-check
LOCK_VENV := .lock-venv

.PHONY: demo test lint install lock clean docs

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) --require-hashes -r requirements.lock
	$(PIP) --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# The default job: the synthetic experiment of the EFA paper on data efa generates itself.
demo: $(STAMP)
	$(BIN)/efa reproduce synthetic --seeds 1 --out runs/demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

# The documentation site: user guide, theory, reproductions, API reference and the gallery
# (examples/, each executed), into docs/_build/html; any Sphinx warning is an error.
docs: $(STAMP)
	rm -rf docs/_build docs/api/generated docs/auto_examples docs/sg_execution_times.rst
	MPLBACKEND=Agg $(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	$(BIN)/python docs/check_site.py docs/_build/html

# Resolve pyproject's ranges (with the dev, experiments and docs extras) afresh to the newest
# versions and write them, with their hashes, to requirements.lock.
lock:
	test -x $(LOCK_VENV)/bin/python || $(PY) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check pip-tools==7.6.2
	$(LOCK_VENV)/bin/pip-compile --quiet --upgrade --generate-hashes --allow-unsafe \
		--strip-extras --extra dev --extra experiments --extra docs --no-emit-index-url \
		--no-emit-find-links --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) $(LOCK_VENV) runs .pytest_cache docs/_build docs/api/generated docs/auto_examples
