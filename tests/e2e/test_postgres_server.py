"""The Prefect server on PostgreSQL (issue 9): a cluster from Debian's packages on
127.0.0.1 (tests/postgres.py) and `prefect server start` on it, as a team runs it beyond
one machine.

A flow runs against the server from its own process; its flow run must be a row of
PostgreSQL's `flow_run` table (not of a SQLite file), and survive a restart of the server.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.prefect_server import PrefectServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FLOW = textwrap.dedent(
    """
    from prefect import flow, runtime

    @flow(name="pg-hello")
    def hello(who: str) -> str:
        print("FLOW_RUN_ID", runtime.flow_run.id)
        return f"hello {who}"

    if __name__ == "__main__":
        hello("postgres")
    """
)


def run_flow(server: PrefectServer, tmp_path: Path) -> str:
    """Run FLOW in a subprocess with the server's env; the id of the flow run it made."""
    script = tmp_path / "hello_flow.py"
    script.write_text(FLOW)
    proc = server.cli(Path(sys.executable).name, str(script), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("FLOW_RUN_ID")]
    return line.split()[1]


def test_the_server_stores_flow_runs_in_postgresql_and_keeps_them_across_a_restart(
    pg_prefect: PrefectServer, tmp_path: Path
):
    pg = pg_prefect.pg
    assert pg is not None

    # The server is configured for this cluster, and has no SQLite database of its own.
    view = pg_prefect.cli("prefect", "config", "view", "--show-secrets", "-o", "json")
    assert view.returncode == 0, view.stdout + view.stderr
    settings = {s["name"]: s["value"] for s in json.loads(view.stdout)["settings"]}
    url = settings["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    assert urlsplit(url).scheme == "postgresql+asyncpg"
    assert (urlsplit(url).hostname, urlsplit(url).port) == ("127.0.0.1", pg.port)
    assert not list(Path(pg_prefect.env["PREFECT_HOME"]).glob("*.db"))

    # Prefect migrated the database at start: its schema is in `prefect`, owned by the role.
    assert pg.sql("SELECT version_num FROM alembic_version")
    assert pg.sql("SELECT tableowner FROM pg_tables WHERE tablename = 'flow_run'") == "prefect"

    flow_run_id = run_flow(pg_prefect, tmp_path)
    run = pg_prefect.get(f"/flow_runs/{flow_run_id}")
    assert run["state_type"] == "COMPLETED"

    # The row, read from PostgreSQL itself.
    row = pg.sql(
        "SELECT f.name, r.state_type FROM flow_run r JOIN flow f ON f.id = r.flow_id "
        f"WHERE r.id = '{flow_run_id}'"
    )
    assert row == "pg-hello|COMPLETED"
    states = pg.sql(f"SELECT type FROM flow_run_state WHERE flow_run_id = '{flow_run_id}'")
    assert {"PENDING", "RUNNING", "COMPLETED"} <= set(states.split())

    # A new server process on the same database serves the same run.
    pg_prefect.stop()
    pg_prefect.start()
    again = pg_prefect.get(f"/flow_runs/{flow_run_id}")
    assert (again["id"], again["state_type"], again["name"]) == (
        flow_run_id,
        "COMPLETED",
        run["name"],
    )
    [flow] = pg_prefect.post("/flows/filter", {"flows": {"name": {"any_": ["pg-hello"]}}})
    assert flow["id"] == run["flow_id"]
