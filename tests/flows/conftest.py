import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session", autouse=True)
def prefect_backend():
    """One temporary Prefect API (SQLite) for every flow test in the session."""
    with prefect_test_harness(server_startup_timeout=120):
        yield
