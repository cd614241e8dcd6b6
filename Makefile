# The two set-up commands: `make up` and `make test`. Everything they need installs from here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEBS := kcat s3cmd faketime

.PHONY: install up test lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q -e ".[dev,bench]"
	@missing=""; for d in $(DEBS); do dpkg -s $$d >/dev/null 2>&1 || missing="$$missing $$d"; done; \
	if [ -n "$$missing" ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	fi
	touch $(STAMP)

install: $(STAMP)

up: install
	$(BIN)/crossbeat up

test: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/mypy benchmarks
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
