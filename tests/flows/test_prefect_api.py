"""The ephemeral API's database is migrated before its server starts (issue 28: on a fresh
machine the server's own first migration outlasted its startup wait, and the first
`specsweep demo` failed)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from prefect.settings import (
    PREFECT_API_DATABASE_CONNECTION_URL,
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_SERVER_EPHEMERAL_ENABLED,
    temporary_settings,
)

from specsweep.flows.prefect_api import MARKER, prepare_ephemeral_api
from tests.conftest import sim_config_data


@contextmanager
def fresh_home(home: Path, api_url: str | None = None) -> Iterator[Path]:
    """This process's Prefect settings as on a fresh machine: no API URL, an empty home."""
    db = home / "prefect.db"
    with temporary_settings(
        updates={
            PREFECT_HOME: str(home),
            PREFECT_API_URL: api_url,
            PREFECT_SERVER_EPHEMERAL_ENABLED: True,
            PREFECT_API_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{db}",
        }
    ):
        yield db


def revision(db: Path) -> list[tuple[str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT version_num FROM alembic_version").fetchall()


def test_a_fresh_home_is_migrated_once_and_again_when_its_database_or_prefect_changes(tmp_path):
    with fresh_home(tmp_path / "prefect") as db:
        assert prepare_ephemeral_api() is True
        assert len(revision(db)) == 1  # at Prefect's head: the server has nothing to migrate
        assert prepare_ephemeral_api() is False  # a usual run: no migration check at all
        db.unlink()
        assert prepare_ephemeral_api() is True  # the database is gone: made again
        (db.parent / MARKER).write_text("another prefect version")
        assert prepare_ephemeral_api() is True  # an upgraded Prefect migrates here too


def test_nothing_is_prepared_for_a_prefect_server(tmp_path):
    with fresh_home(tmp_path / "prefect", api_url="http://127.0.0.1:9/api") as db:
        assert prepare_ephemeral_api() is False
        assert not db.exists()


@pytest.mark.slow
def test_specsweep_run_on_a_fresh_home_leaves_its_server_nothing_to_migrate(tmp_path, port):
    # The ephemeral server is told not to migrate: the sweep reaches its API (creates the
    # target's limit, runs and records its variants) only if the CLI migrated the database
    # before the server started. Without that step this fails on the first API call.
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sim_config_data(tmp_path, port, load={"concurrency": [1]})))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {
        "HOME": str(tmp_path / "home"),  # no ~/.prefect
        "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "specsweep.cli", "run", "step-sweep", "-c", str(path),
         "--set", "server.env.SPECSWEEP_SIM_CRASH=load", "--set", "step_sweep.num_steps=[1]"],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # the crashing simulator: variants failed, recorded
    assert "variants failed: baseline, eagle3-s1-k1-d2" in out
    assert "Prefect's database for its temporary API: created and migrated" in out
    assert (tmp_path / "home" / ".prefect" / MARKER).is_file()
