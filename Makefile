# Everything installs itself: a fresh machine needs only Python 3.11+ and make.
PYTHON ?= python3
UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/$(VENV)
# Prefect: no telemetry from test or demo runs (CI and many GPU hosts have no internet).
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false

.PHONY: demo test test-clock install refclients lint format lock clean

# DEMO_ARGS passes options: `make demo DEMO_ARGS="--set server.port=31900"`.
demo: install  ## A step sweep on the bundled SGLang simulator (no GPU), then its summary.
	$(VENV)/bin/specsweep demo $(DEMO_ARGS)

# Three workers on two cores: the tests wait on simulated GPU time, Prefect's workers and
# servers starting, so a third worker keeps both cores busy (from a fresh clone on a 2-core
# VM, install included, 2026-12-07: 535-664 s with three, once 763 s; 621-656 s with two).
# The suite is then CPU-bound (1,090-1,280 CPU seconds: its time moves with the machine's
# speed that day). What three workers load is the measurements a few tests need to be
# decisive: the fleet's slower-host test ran its one-host reference sweep beside the
# fleet's workers and found no clear level in 2 of 10 runs; it now runs the reference
# first (clear in 4 of 4 runs beside two busy loops).
# `make test PYTEST_WORKERS=2` runs two, `PYTEST_WORKERS=0` serially; flags in
# PYTEST_ARGS.
PYTEST_WORKERS ?= 3
test: install refclients  ## The whole test suite.
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The tests that read the calendar, with every process's clock (the tests', the Prefect
# server's, the worker's) moved to CLOCK_AT by libfaketime (Debian's faketime package);
# by default two days before the spring switch in Europe/Berlin (2027-03-28).
CLOCK_AT ?= 2027-03-26T12:00:00+00:00
CLOCK_TESTS ?= tests/unit/deployments tests/unit/config tests/flows/test_catalogue.py \
	tests/e2e/test_run_names.py
test-clock: install  ## The calendar's tests at a moved clock.
	tests/moved_clock.sh $(CLOCK_AT) $(VENV)/bin/pytest $(PYTEST_ARGS) $(CLOCK_TESTS)

# SGLang's own benchmark clients in their own venv, for the protocol-agreement test.
refclients: $(UV)
	PYTHON=$(PYTHON) bash tests/protocol/setup_refclients.sh

install: $(VENV)/.synced

$(UV):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "specsweep needs Python 3.11+ (set PYTHON=...)")'
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Bytecode is compiled at install, for the packages and for specsweep's own code: every
# process the demo and the suite start (servers, workers, the CLI) then reads it instead
# of compiling prefect, pandas and the rest again, which costs about 1 s of CPU per process
# where PYTHONDONTWRITEBYTECODE is set (and the first process everywhere else).
$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --compile-bytecode --python $(PYTHON)
	$(VENV)/bin/python -m compileall -q -j 0 specsweep flows tasks deployments tests
	@touch $@

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

lock: $(UV)
	$(UV) lock --python $(PYTHON)

clean:
	rm -rf $(VENV) $(TOOLS) .refclients .pytest_cache .ruff_cache .specsweep
