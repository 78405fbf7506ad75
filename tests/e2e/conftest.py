"""One real Prefect stack per session: `prefect server start` (SQLite, its own
PREFECT_HOME) on a loopback port, `specsweep deploy`, and a process worker, all
as separate processes talking HTTP, exactly as a user runs them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import free_port, sim_config_data

BIN = Path(sys.executable).parent
POOL = "specsweep-e2e"
TARGET = "e2e-host"


@dataclass
class PrefectStack:
    api: str  # http://127.0.0.1:PORT/api
    env: dict[str, str]
    project: Path  # where deploy ran: the worker's working_dir
    config_data: dict[str, Any]  # the deployments' default config (fills the UI form)
    logs: Path

    @property
    def ui(self) -> str:
        return self.api.removesuffix("/api")

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

    def get(self, path: str) -> Any:
        response = requests.get(f"{self.api}{path}", timeout=10)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        response = requests.post(f"{self.api}{path}", json=body, timeout=10)
        response.raise_for_status()
        return response.json() if response.content else None

    def flow_runs(self, deployment: str) -> list[dict[str, Any]]:
        dep = self.get(f"/deployments/name/{deployment}")
        return self.post(
            "/flow_runs/filter", {"deployments": {"id": {"any_": [dep["id"]]}}, "limit": 50}
        )

    def wait_state(self, flow_run_id: str, final: set[str], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(f"/flow_runs/{flow_run_id}")
            if run["state_type"] in final or time.monotonic() > deadline:
                return run
            time.sleep(0.5)

    def sweep_config(self, tmp: Path, target: str = TARGET, **sections: Any) -> dict[str, Any]:
        """A fast simulator sweep on a target, with its own port and paths."""
        data = sim_config_data(tmp, free_port(), **sections)
        data["target"] = {"kind": "local", "name": target, "workdir": str(tmp / "work")}
        return data


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(url, timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not up after {timeout}s:\n{log.read_text()[-3000:]}")


def _start(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def prefect_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectStack]:
    root = tmp_path_factory.mktemp("prefect-e2e")
    project = root / "project"
    project.mkdir()
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(root / "prefect-home"),
        PREFECT_API_URL=api,
        PREFECT_UI_API_URL=api,  # the UI calls the API on this port, not the default 4200
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",  # pick up runs quickly (default 10 s)
        PREFECT_LOGGING_LEVEL="INFO",
    )
    server = _start(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env,
        root,
        root / "server.log",
    )
    worker = None
    try:
        _wait_http(f"{api}/health", server, root / "server.log", timeout=120)
        config_data = sim_config_data(project, free_port(), load={"concurrency": [1, 2]})
        config_data["target"] = {"kind": "local", "name": TARGET, "workdir": "work"}
        config_data["results_dir"] = "results"  # relative: resolved in the worker's working_dir
        (project / "sweep.yaml").write_text(yaml.safe_dump(config_data))
        stack = PrefectStack(api, env, project, config_data, root)
        deployed = stack.cli("specsweep", "deploy", "-c", "sweep.yaml", "--pool", POOL)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        worker = _start(
            [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--name", "e2e-worker"],
            env,
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
        _stop(server)


def flow_run_id(output: str) -> str:
    """The UUID `prefect deployment run` prints for the run it created."""
    for line in output.splitlines():
        if "UUID:" in line:
            return line.split("UUID:")[1].strip()
    raise AssertionError(f"no flow run UUID in:\n{output}")


def as_param(data: dict[str, Any]) -> str:
    return "config=" + json.dumps(data)
