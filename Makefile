# The two set-up commands of the README: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,experiments]'
	touch $(STAMP)

install: $(STAMP)

# The default job: the synthetic experiment of the EFA paper on data efa generates itself.
demo: $(STAMP)
	$(BIN)/efa reproduce synthetic --seeds 1 --out runs/demo

lint: $(STAMP)
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) runs .pytest_cache
