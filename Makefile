# Two commands: `make run` and `make test`. Each sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Prefect's local mode keeps its state inside the checkout, quietly.
export PREFECT_HOME ?= $(CURDIR)/var/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1

.PHONY: run test lint validate openapi clean system-packages serve

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Debian packages the tests drive: nginx serves a release, Chromium reads its pages.
SYSTEM_PACKAGES := nginx chromium fonts-dejavu-core

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
	         --no-install-recommends $$missing; \
	fi

run: $(STAMP)  ## ingest, probe, score and publish a release into public/
	mkdir -p $(PREFECT_HOME)
	$(BIN)/apidir run

test: $(STAMP) system-packages  ## lint and run the whole test suite
	mkdir -p $(PREFECT_HOME)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

validate: $(STAMP)  ## check every entry file
	$(BIN)/apidir validate

serve: $(STAMP)  ## preview the published release at http://127.0.0.1:8000/
	$(BIN)/apidir serve

openapi: $(STAMP)  ## refresh the committed copy of the OpenAPI document
	$(BIN)/apidir openapi > docs/openapi.json

clean:
	rm -rf $(VENV) var public .pytest_cache test-output
