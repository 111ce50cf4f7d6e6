# Two commands: `make run` and `make test`. Each sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Prefect's local mode keeps its state inside the checkout, quietly.
export PREFECT_HOME ?= $(CURDIR)/var/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1

# The store and flow tests also run on PostgreSQL: the test session starts a throwaway server
# from the distribution's binaries under var/ (tests/postgres_server.py) and stops it at the
# end. Installed here when missing, without the package's default cluster (nothing is left
# running); as root directly, otherwise through sudo.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
PG_NO_MAIN := /etc/postgresql-common/createcluster.d/apidir-no-main-cluster.conf

.PHONY: run test lint validate openapi clean system-packages serve postgres-binaries bench

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Debian packages the tests drive: nginx serves a release, Chromium reads its pages, PgBouncer
# pools the PostgreSQL store's connections. The tests start their own nginx and PgBouncer on
# free loopback ports, so the services these two packages start when installed (nginx on port
# 80, PgBouncer on 6432) are stopped and disabled where systemd runs them: nothing is left
# running, as with PostgreSQL below. A package that was installed already is left alone.
SYSTEM_PACKAGES := nginx chromium fonts-dejavu-core pgbouncer
SYSTEM_SERVICES := nginx pgbouncer
SYSTEMD_DIR     ?= /run/systemd/system

system-packages:  ## install the Debian packages the tests need, when missing
	@missing=""; \
	for pkg in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "ok installed" \
	    || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; \
	  elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	  else echo "missing Debian packages:$$missing (install them as root)" >&2; exit 1; fi; \
	  echo "installing Debian packages:$$missing"; \
	  $$sudo apt-get update -qq \
	    && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	         --no-install-recommends $$missing || exit 1; \
	  started=""; \
	  for pkg in $$missing; do \
	    case " $(SYSTEM_SERVICES) " in *" $$pkg "*) started="$$started $$pkg";; esac; \
	  done; \
	  if [ -n "$$started" ] && [ -d "$(SYSTEMD_DIR)" ]; then \
	    echo "stopping the services the tests do not use:$$started"; \
	    $$sudo systemctl disable --now $$started; \
	  fi; \
	fi

run: $(STAMP)  ## ingest, probe, score and publish a release into public/
	mkdir -p $(PREFECT_HOME)
	$(BIN)/apidir run

postgres-binaries:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "no apt-get: install PostgreSQL's server binaries, or set APIDIR_TEST_POSTGRES_URL"; \
	else \
	  echo "installing the Debian package postgresql for the PostgreSQL tests"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-common && \
	  $(SUDO) mkdir -p $(dir $(PG_NO_MAIN)) && \
	  echo "create_main_cluster = false" | $(SUDO) tee $(PG_NO_MAIN) >/dev/null && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; \
	fi

lint: $(STAMP)  ## check the code with ruff
	$(BIN)/ruff check .

test: lint system-packages postgres-binaries  ## lint and run the whole test suite (SQLite and PostgreSQL)
	mkdir -p $(PREFECT_HOME)
	$(BIN)/python -m pytest

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) system-packages  ## print the benchmark figures (see docs/performance.md)
	mkdir -p $(PREFECT_HOME)
	$(BIN)/python -m bench.compare_lychee
	$(BIN)/python -m bench.makespan
	$(BIN)/python -m bench.catalogue
	$(BIN)/python -m bench.page_weight
	$(BIN)/python -m bench.score_scale --entries 20000

validate: $(STAMP)  ## check every entry file
	$(BIN)/apidir validate

serve: $(STAMP)  ## preview the published release at http://127.0.0.1:8000/
	$(BIN)/apidir serve

openapi: $(STAMP)  ## refresh the committed OpenAPI document and the entry file's JSON Schema
	$(BIN)/apidir openapi > docs/openapi.json
	$(BIN)/apidir entry-schema > docs/entry.schema.json

# What is rebuilt: the store (var/apidir.db), Prefect's local state (var/prefect) and the
# published release (public/) are kept, as they hold the history no command rebuilds.
clean:  ## remove the virtual environment, caches, build output and benchmark data
	rm -rf $(VENV) .pytest_cache .ruff_cache build test-output var/bench var/test-postgres
	find . -path ./var -prune -o -path ./public -prune -o \
	  \( -name __pycache__ -o -name '*.egg-info' \) -type d -prune -exec rm -rf {} +
