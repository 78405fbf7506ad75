"""A real `prefect server start` on a loopback port, as its own process session.

`prefect_server(root)` starts the server with a clean environment: every inherited
PREFECT_* variable dropped, PREFECT_HOME under `root`, the API (and the UI's API) on a free
port of 127.0.0.1, no analytics, workers polling every second; on SQLite under PREFECT_HOME
by default, or on the database `database_url` names (PostgreSQL: tests/postgres.py). It
waits for /api/health and yields a PrefectServer whose `env` is what a worker or CLI run
against this server needs. On exit the server's whole process group gets SIGTERM, then
SIGKILL.

No pytest here: benchmarks/ starts servers with it too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tests.conftest import free_port

if TYPE_CHECKING:
    from tests.postgres import PgCluster

BIN = Path(sys.executable).parent  # the venv's prefect and specsweep
START_TIMEOUT_S = 180  # migrations on a fresh database: seconds, more on a slow machine


def start_process(
    argv: list[str], env: Mapping[str, str], cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    """`argv` in its own session (so its process group can be stopped whole), output
    appended to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, env=dict(env), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM to the process group, SIGKILL after `timeout` s; then SIGKILL to every
    descendant still alive, wherever it went: a process worker starts each flow run in a
    session of its own, out of the worker's group."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived the leader
    for child in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(descendants, timeout=5)


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Until `url` answers 2xx; fails at once with the log's tail if `proc` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(url, timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not up after {timeout}s:\n{log.read_text()[-3000:]}")


def server_env(
    root: Path, api: str, database_url: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This environment without PREFECT_* variables, plus what talks to (or is) the server
    at `api`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(root / "prefect-home"),
        PREFECT_API_URL=api,
        PREFECT_UI_API_URL=api,  # the UI calls the API on this port, not the default 4200
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",  # pick up runs quickly (default 10 s)
        PREFECT_LOGGING_LEVEL="INFO",
        # a busy SQLite answers 503 with no trace by default; the UI shows any 5xx as its
        # "Oops. Something went wrong." toast (tests/e2e/test_ui_form.py): name it in the log
        PREFECT_SERVER_LOG_RETRYABLE_ERRORS="true",
    )
    if database_url is not None:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    env.update(extra or {})
    return env


def _api_session() -> requests.Session:
    """A session that retries what Prefect's server marks as retryable, as Prefect's client does.

    A SQLite database that another writer holds answers `database is locked`, which the server
    turns into 503 ("retry"); `prefect.client.base.PrefectHttpxAsyncClient` retries 429, 502 and
    503 with backoff, so a client that gives up at the first 503 fails where Prefect's own does not.
    """
    retry = Retry(
        total=6,
        status_forcelist=(429, 502, 503),
        allowed_methods=None,  # every method: Prefect's client retries POSTs too
        backoff_factor=0.5,
        raise_on_status=False,  # the caller's raise_for_status names the last status
    )
    session = requests.Session()
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


_SESSION = _api_session()


class PrefectApi:
    """JSON over the REST API at `self.api` (http://127.0.0.1:PORT/api)."""

    api: str

    @property
    def ui(self) -> str:
        return self.api.removesuffix("/api")

    def get(self, path: str) -> Any:
        response = _SESSION.get(f"{self.api}{path}", timeout=10)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        response = _SESSION.post(f"{self.api}{path}", json=body, timeout=10)
        response.raise_for_status()
        return response.json() if response.content else None

    def delete(self, path: str) -> None:
        _SESSION.delete(f"{self.api}{path}", timeout=10).raise_for_status()

    def flow_runs(self, deployment: str) -> list[dict[str, Any]]:
        dep = self.get(f"/deployments/name/{deployment}")
        return self.post(
            "/flow_runs/filter", {"deployments": {"id": {"any_": [dep["id"]]}}, "limit": 50}
        )

    def wait_state(self, flow_run_id: str, final: set[str], timeout: float) -> dict[str, Any]:
        """The run once its state_type is in `final`, or as it is at `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(f"/flow_runs/{flow_run_id}")
            if run["state_type"] in final or time.monotonic() > deadline:
                return run
            time.sleep(0.5)


@dataclass
class PrefectServer(PrefectApi):
    api: str  # http://127.0.0.1:PORT/api
    env: dict[str, str]  # for workers and CLI runs against this server
    root: Path
    log: Path
    proc: subprocess.Popen[bytes] = field(repr=False)
    pg: PgCluster | None = None  # the PostgreSQL cluster it runs on, where it does

    @property
    def database_url(self) -> str | None:
        return self.env.get("PREFECT_API_DATABASE_CONNECTION_URL")

    def cli(
        self, *argv: str, cwd: Path | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """`prefect ...` or `specsweep ...` from the venv with this server's env (in root)."""
        return subprocess.run(
            [str(BIN / argv[0]), *argv[1:]],
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_worker(
        self, pool: str, name: str, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """`prefect worker start` against this server in its own session, logging to
        root/worker-NAME.log. Stop it with stop_process()."""
        argv = [str(BIN / "prefect"), "worker", "start", "--pool", pool, "--name", name]
        return start_process(argv, self.env, cwd or self.root, self.root / f"worker-{name}.log")

    def stop(self) -> None:
        stop_process(self.proc)

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the server (again) on the same port, database and PREFECT_HOME."""
        if self.proc.poll() is None:
            raise RuntimeError("the Prefect server is still running: stop() it first")
        self.proc = _launch(self.api, self.env, self.root, self.log)
        wait_http(f"{self.api}/health", self.proc, self.log, timeout)


def _launch(api: str, env: Mapping[str, str], root: Path, log: Path) -> subprocess.Popen[bytes]:
    port = api.removesuffix("/api").rsplit(":", 1)[1]
    argv = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", port]
    return start_process(argv, env, root, log)


@contextlib.contextmanager
def prefect_server(
    root: Path,
    database_url: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> Iterator[PrefectServer]:
    """A Prefect server on 127.0.0.1, ready (/api/health), stopped on exit."""
    root.mkdir(parents=True, exist_ok=True)
    api = f"http://127.0.0.1:{free_port()}/api"
    env = server_env(root, api, database_url, extra_env)
    log = root / "server.log"
    server = PrefectServer(api, env, root, log, _launch(api, env, root, log))
    try:
        wait_http(f"{api}/health", server.proc, log, timeout)
        yield server
    finally:
        server.stop()
