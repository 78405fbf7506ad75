"""The Prefect server on PostgreSQL (issue 9): a cluster from Debian's packages on
127.0.0.1 (tests/postgres.py) and `prefect server start` on it, as a team runs it beyond
one machine.

The server process must hold connections to the cluster; a flow run against the server
from its own process must be a row of PostgreSQL's `flow_run` table (and no SQLite file
exist), and survive a restart of the server.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.postgres import PgCluster
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


def server_ports(server: PrefectServer, pg_port: int) -> set[int]:
    """Local ports of the server's (and its children's) TCP connections to `pg_port`."""
    proc = psutil.Process(server.proc.pid)
    return {
        conn.laddr.port
        for p in [proc, *proc.children(recursive=True)]
        for conn in p.net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == pg_port
    }


def session_ports(pg: PgCluster) -> set[int]:
    """Client ports of PostgreSQL's other sessions on the `prefect` database."""
    rows = pg.sql(
        "SELECT client_port FROM pg_stat_activity "
        "WHERE datname = 'prefect' AND pid <> pg_backend_pid() AND client_port > 0"
    )
    return {int(port) for port in rows.split()}


def test_the_server_stores_flow_runs_in_postgresql_and_keeps_them_across_a_restart(
    pg_prefect: PrefectServer, tmp_path: Path
):
    pg = pg_prefect.pg
    assert pg is not None

    # The server process itself holds connections to this cluster (the sessions PostgreSQL
    # lists, matched by client port), and has no SQLite database of its own.
    assert server_ports(pg_prefect, pg.port) & session_ports(pg)
    assert not list(Path(pg_prefect.env["PREFECT_HOME"]).glob("*.db"))

    # Prefect migrated the database at start: its schema is in `prefect`, owned by the role.
    assert pg.sql("SELECT version_num FROM alembic_version")
    assert pg.sql("SELECT tableowner FROM pg_tables WHERE tablename = 'flow_run'") == "prefect"
    # pg_trgm, which Prefect's docs require, created by the migrations as the database owner
    # (a trusted extension since PostgreSQL 13: no superuser needed).
    assert pg.sql("SELECT extname FROM pg_extension WHERE extname = 'pg_trgm'") == "pg_trgm"
    assert pg.sql("SELECT rolsuper FROM pg_roles WHERE rolname = current_user") == "f"

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
