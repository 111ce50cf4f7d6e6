# Two commands: `make run` and `make test`. Each sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Prefect's local mode keeps its state inside the checkout, quietly.
export PREFECT_HOME ?= $(CURDIR)/var/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1

.PHONY: run test lint validate openapi clean bench bench-nginx

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)  ## ingest, probe, score and publish a release into public/
	mkdir -p $(PREFECT_HOME)
	$(BIN)/apidir run

test: $(STAMP)  ## lint and run the whole test suite
	mkdir -p $(PREFECT_HOME)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-nginx:  ## Debian's nginx, the server the link-checker comparison runs against
	command -v nginx >/dev/null || test -x /usr/sbin/nginx || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx)

bench: $(BENCH_STAMP) bench-nginx  ## print the benchmark figures (see docs/performance.md)
	mkdir -p $(PREFECT_HOME)
	$(BIN)/python -m bench.compare_lychee
	$(BIN)/python -m bench.makespan
	$(BIN)/python -m bench.catalogue

validate: $(STAMP)  ## check every entry file
	$(BIN)/apidir validate

openapi: $(STAMP)  ## refresh the committed copy of the OpenAPI document
	$(BIN)/apidir openapi > docs/openapi.json

clean:
	rm -rf $(VENV) var public .pytest_cache
