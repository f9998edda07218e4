# Two entry points for a fresh machine (README): `make up` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint unit integration bench-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# The main job: a whole installation on this machine, no Kubernetes.
up: $(STAMP)
	$(BIN)/brokergroup local up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/pytest -q tests/integration

# The whole test suite: lint, types, layers, then every tier that can run here.
test: lint
	$(BIN)/pytest -q -p no:cacheprovider tests

bench-quick: $(STAMP)
	$(BIN)/python bench/controller.py --quick

clean:
	rm -rf $(VENV)
