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

# Three workers on two cores. The suite's processes mostly wait (simulated GPU time,
# Prefect's worker polls and heartbeats, a lost host waited out, servers coming up): at
# two workers the cores were busy about 64% of the time (2026-12-07: 842 CPU seconds over
# 684 s of wall), at three 83% (930 over 563 s), so a third worker fills the waiting.
# Whole `make test` from a fresh clone with an empty HOME (install and the reference
# clients' download included) that day: 684 s at two workers, 634 and 674 s at three;
# pytest alone in a clone already installed: 654 s at two, 558-563 s at three. Three once
# made two tests too noisy to decide: the fleet's slower-host reference, measured beside
# the fleet (it now runs before the fleet starts), and a decision-flow drift read during a
# loaded pass. `make test PYTEST_WORKERS=2` runs two, `PYTEST_WORKERS=0` serially; flags
# in PYTEST_ARGS.
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
