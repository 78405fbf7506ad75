import pytest
from prefect.testing.utilities import prefect_test_harness

from specsweep.flows.target_lock import ensure_target_limit

# Target names the flow tests use (tests/conftest.py's sim config is "test-host").
TEST_TARGETS = ("test-host", "local", "local-sim")


@pytest.fixture(scope="session", autouse=True)
def prefect_backend():
    """One temporary Prefect API (SQLite) for every flow test in the session.

    The per-target global concurrency limits are strict, so the harness creates
    them the way `specsweep limits create` does on a real server.
    """
    with prefect_test_harness(server_startup_timeout=120):
        for name in TEST_TARGETS:
            ensure_target_limit(f"specsweep-target-{name}")
        yield
