"""One real Prefect stack per session: `prefect server start` (SQLite, its own
PREFECT_HOME) on a loopback port, `specsweep deploy`, and `specsweep worker` (Prefect's
process worker that also names new runs), all as separate processes talking HTTP,
exactly as a user runs them, in a project directory that holds its own `flows`, `tasks`
and `deployments` packages.

`pg_prefect` is the same server on PostgreSQL (a cluster from Debian's packages on
127.0.0.1, tests/postgres.py), with nothing deployed: tests deploy and start their own
workers against it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port, server_group, sim_config_data, write_user_packages
from tests.postgres import postgres_cluster
from tests.prefect_server import BIN, PrefectApi, PrefectServer, prefect_server
from tests.prefect_server import start_process as _start
from tests.prefect_server import stop_process as _stop
from tests.prefect_server import wait_http as _wait_http

__all__ = ["BIN", "POOL", "TARGET", "PrefectStack", "_start", "_stop", "_wait_http"]

POOL = "specsweep-e2e"
TARGET = "e2e-host"


@dataclass
class PrefectStack(PrefectApi):
    api: str  # http://127.0.0.1:PORT/api
    env: dict[str, str]
    project: Path  # where deploy ran: the worker's working_dir
    config_data: dict[str, Any]  # the deployments' default config (fills the UI form)
    logs: Path

    def cli(self, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """`prefect ...` or `specsweep ...` from the venv, in the project dir."""
        return subprocess.run(
            [str(BIN / argv[0]), *argv[1:]],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def sweep_config(self, tmp: Path, target: str = TARGET, **sections: Any) -> dict[str, Any]:
        """A fast simulator sweep on a target, with its own port and paths."""
        data = sim_config_data(tmp, free_port(), **sections)
        data["target"] = {"kind": "local", "name": target, "workdir": str(tmp / "work")}
        return data


@pytest.fixture(scope="session")
def prefect_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectStack]:
    root = tmp_path_factory.mktemp("prefect-e2e")
    project = root / "project"
    project.mkdir()
    # A Prefect project of the user's, with its own flows/ tasks/ deployments/ packages:
    # deploy, the worker and every run it starts work in it (issue 28).
    write_user_packages(project)
    worker = None
    with prefect_server(root) as server:
        try:
            config_data = sim_config_data(
                project,
                free_port(),
                load={"concurrency": [1, 2]},
                algorithm_sweep={"ngram": {}},  # the algorithm sweep's form runs as it is
            )
            config_data["target"] = {"kind": "local", "name": TARGET, "workdir": "work"}
            # its own simulated GPUs: GPU checks go through the simulator's nvidia-smi
            config_data["server"]["env"]["SPECSWEEP_SIM_GPU_STATE"] = "work/sim-gpus"
            config_data["results_dir"] = "results"  # relative: resolved in the worker's working_dir
            (project / "sweep.yaml").write_text(yaml.safe_dump(config_data))
            stack = PrefectStack(server.api, server.env, project, config_data, root)
            deployed = stack.cli("specsweep", "deploy", "-c", "sweep.yaml", "--pool", POOL)
            assert deployed.returncode == 0, deployed.stdout + deployed.stderr
            worker = _start(  # names and tags each run as soon as it is created
                [str(BIN / "specsweep"), "worker", "--pool", POOL, "--name", "e2e-worker"],
                server.env,
                project,
                root / "worker.log",
            )
            deadline = time.monotonic() + 60
            while not stack.post(f"/work_pools/{POOL}/workers/filter", {}):
                assert time.monotonic() < deadline, (root / "worker.log").read_text()[-3000:]
                time.sleep(0.5)
            yield stack
        finally:
            if worker is not None:
                _stop(worker)


@pytest.fixture(scope="session")
def pg_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """A Prefect server on a PostgreSQL cluster of its own (`.pg`), both on 127.0.0.1, for
    the session; nothing deployed, no worker. Skips (fails in CI) without PostgreSQL."""
    root = tmp_path_factory.mktemp("pg-prefect")
    with postgres_cluster(root / "postgres") as pg, prefect_server(root, pg.url) as server:
        server.pg = pg
        yield server


# What each group's tests share; see pytest_runtest_teardown.
_GROUP_SERVERS = ("prefect_stack", "pg_prefect")


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a group's last test, its Prefect server, worker and PostgreSQL cluster stop.

    They are session fixtures so that the group starts them once, but left up they would
    poll (the server's services, the worker asking for runs every second: about a fifth of
    a core) while the rest of the suite runs on the same two cores. A group's tests run
    back to back (tests/conftest.py), so the next test being outside the group means no
    test of this worker needs them again; one that did would start them anew.
    """
    if nextitem is not None and server_group(nextitem.nodeid) == server_group(item.nodeid):
        return
    for name in _GROUP_SERVERS:
        fixturedefs = item._fixtureinfo.name2fixturedefs.get(name)
        if fixturedefs:
            fixturedefs[-1].finish(item._request)


def flow_run_id(output: str) -> str:
    """The UUID `prefect deployment run` prints for the run it created."""
    for line in output.splitlines():
        if "UUID:" in line:
            return line.split("UUID:")[1].strip()
    raise AssertionError(f"no flow run UUID in:\n{output}")


def as_param(data: dict[str, Any]) -> str:
    return "config=" + json.dumps(data)
