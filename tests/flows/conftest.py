import pytest
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.testing.utilities import prefect_test_harness

from specsweep.flows.target_lock import ensure_target_limit

# Target names the flow tests use (tests/conftest.py's sim config is "test-host").
TEST_TARGETS = ("test-host", "local", "local-sim")


@pytest.fixture(scope="session", autouse=True)
def prefect_backend():
    """One temporary Prefect API (SQLite) for every flow test in the session.

    The per-target global concurrency limits are strict, so the harness creates
    them the way `specsweep limits create` does on a real server.

    Flow-run heartbeats are off here: nothing in these tests watches them (the fleet's
    lost-host test does, on its own server and worker, tests/e2e/test_fleet.py), and
    each run's end waits for its heartbeat thread, which sleeps in whole seconds: about
    0.6 s per flow run, 80 s of the flow tests' time (Prefect 3.9 heartbeats every flow
    run by default, PREFECT_FLOWS_HEARTBEAT_FREQUENCY = 180; no environment value turns
    them off, a settings context can).
    """
    with (
        temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
        prefect_test_harness(server_startup_timeout=120),
    ):
        for name in TEST_TARGETS:
            ensure_target_limit(f"specsweep-target-{name}")
        yield
