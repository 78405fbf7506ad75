"""Shared fixtures: free loopback ports and simulator configurations."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import settings

from specsweep.config.file import parse_config

# The same examples on every run: a property test must not pass today and fail in
# tomorrow's CI on a case it happened to draw. Explore locally with
# HYPOTHESIS_PROFILE=explore.
settings.register_profile("specsweep", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "specsweep"))


def _stop_the_session(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"pytest got signal {signum}")


def _stop_the_workers(signum: int, frame: object) -> None:
    """The xdist controller: its workers hold the servers, and it would SIGKILL them on
    its way out; they get the signal first and are given time to unwind."""
    for worker in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.send_signal(signum)
    raise KeyboardInterrupt(f"pytest got signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM or SIGHUP (a `timeout`, a CI job cancelled, a closed terminal) would end
    pytest at once, and every server, sshd, Prefect server and PostgreSQL cluster a test
    started would outlive it. As KeyboardInterrupt they unwind: `finally` blocks and
    fixture finalizers stop what they started. Under xdist the controller passes the
    signal on to its workers and waits for them."""
    controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(
        config, "workerinput"
    )
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _stop_the_workers if controller else _stop_the_session)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _port_window() -> range:
    """This xdist worker's own slice of the ports below the kernel's ephemeral range.

    A port taken with bind(0) is ephemeral: closed again, the kernel can hand it to any
    process's next bind(0) or outgoing connection before the server under test binds it
    (seen in CI: a Prefect worker listening on the port chosen for a simulator). Below
    the range nothing is handed out implicitly, and each worker picks from its own slice.
    """
    low = 20000
    high = min(_ephemeral_range()[0], 32768)
    if high - low < 1000:
        low, high = 1024 + 1, high
    slices = 8
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % slices if worker.isdigit() else 0
    width = (high - low) // slices
    return range(low + index * width, low + (index + 1) * width)


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port no process holds now and the kernel will not hand out by itself.

    Never the same port twice in one process while others are left: a port is free until
    the process it was chosen for binds it, and a test that chooses two (its server's and
    another server's, still starting) got the same one twice (CI, 1 in ~1,600 per pair):
    cleanup for one port then rightly killed the other server as the port's sglang."""
    window = _port_window()
    if len(_HANDED_OUT) > len(window) // 2:
        _HANDED_OUT.clear()
    for _ in range(200):
        port = random.choice(window)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {window.start}-{window.stop - 1}")


@pytest.fixture
def port() -> int:
    return free_port()


# Loading and warming up take 0.1 s each: a launch still passes through both states
# (tests/integration/test_health_wait.py watches them with their own, longer phases), and
# the suite's ~180 launches each start 0.4 s sooner than at 0.3 s.
FAST_SIM_ENV = {
    "SPECSWEEP_SIM_TIME_SCALE": "0.05",
    "SPECSWEEP_SIM_LOAD_SECONDS": "0.1",
    "SPECSWEEP_SIM_WARMUP_SECONDS": "0.1",
}


def sim_config_data(tmp_path: Path, port: int, **sections: Any) -> dict[str, Any]:
    """A small, fast step sweep on the simulator, as the dict a YAML file would give."""
    data: dict[str, Any] = {
        "name": "test",
        "target": {"kind": "local", "name": "test-host", "workdir": str(tmp_path / "work")},
        "results_dir": str(tmp_path / "results"),
        "server": {
            "backend": "simulator",
            "model_path": "sim/llama",
            "port": port,
            "max_running_requests": 32,
            "startup_timeout_s": 30,
            "env": dict(FAST_SIM_ENV),
        },
        "step_sweep": {"algorithm": "EAGLE3", "draft_model_path": "sim/draft", "num_steps": [2]},
        "load": {
            "concurrency": [1, 4],
            "input_len": 16,
            "output_len": 16,
            "requests_per_stream": 2,
            "min_requests": 4,
            # measuring more and the drift calibration are tested on their own
            # (tests/flows/test_decision_flow.py, tests/unit/test_pipeline_calibration.py);
            # here every level gets exactly its planned passes, fast and as each test counts
            # them, and no calibration passes before the first level
            "decide_budget_s": 0,
            "calibrate_drift": False,
        },
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


@pytest.fixture
def sim_config(tmp_path: Path, port: int):
    return parse_config(sim_config_data(tmp_path, port))


USER_PACKAGES = ("flows", "tasks", "deployments")


def write_user_packages(directory: Path) -> None:
    """A Prefect project's own `flows`, `tasks` and `deployments` packages in ``directory``,
    with a module of each name specsweep's folders hold that fails when imported: specsweep
    (specsweep.flows, ...) must never import them, nor shadow them (issue 28)."""
    repo = Path(__file__).resolve().parents[1]
    for name in USER_PACKAGES:
        package = directory / name
        package.mkdir()
        (package / "__init__.py").write_text(f'"""The user\'s own {name}."""\nOWNER = "user"\n')
        for module in (repo / name).glob("*.py"):
            if module.name != "__init__.py":
                what = f"the user's {name}.{module.stem}"
                (package / module.name).write_text(f"raise ImportError({what!r})\n")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real OpenSSH server on 127.0.0.1 (key auth, its own known_hosts), one per session."""
    from tests.needs import missing
    from tests.sshd import start_sshd, why_unavailable

    reason = why_unavailable()
    if reason is not None:
        missing("SSHD", reason)
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


# The e2e tests on the Prefect server backed by PostgreSQL (pg_prefect); the others share
# the SQLite-backed one (prefect_stack).
_ON_POSTGRES = ("tests/e2e/test_fleet.py", "tests/e2e/test_postgres_server.py")


# Tests that leave an sglang scheduler of this user orphaned (SPECSWEEP_SIM_ORPHAN, a
# crashed launcher) or clean up by name: where nvidia-smi shows no PIDs (a container),
# cleanup finds orphans by name, user and start time, and one test's orphan is then
# indistinguishable from another's running at the same moment (CI: a container teardown
# killed a concurrent test's orphaned scheduler). They run one at a time, on one worker.
_ORPHANS = (
    "tests/integration/test_gpu_cleanup.py",
    "tests/integration/sim/test_sim_tree.py",
    "tests/ssh/test_ssh_target.py",
    "tests/flows/test_step_sweep_flow.py",
    "tests/unit/sim/test_sim_knobs.py",
)


def server_group(nodeid: str) -> str | None:
    """The group a test runs in: those sharing a Prefect server, those leaving orphaned
    sglang processes; None for the rest."""
    if nodeid.startswith(_ON_POSTGRES):
        return "e2e-postgres"
    if nodeid.startswith("tests/e2e/"):
        return "e2e"
    if nodeid.startswith(_ORPHANS):
        return "sglang-orphans"
    return None


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `-n --dist loadgroup`, each group (server_group) runs on one worker: the e2e
    tests of one Prefect server, so that server (and the PostgreSQL cluster) starts once,
    and the tests that leave orphaned schedulers, one at a time.

    xdist groups by an ``@group`` suffix its worker writes into each marked test's node id,
    which pytest 9's node ids no longer take (`item._nodeid` is gone): every worker then
    started its own stack and cluster. This scheduler groups by the tests' paths instead."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ServerGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return server_group(nodeid) or super()._split_scope(nodeid)

    return ServerGroups(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each grouped test with its group (server_group), and runs each group's tests
    back to back without xdist too, so that a Prefect server can be stopped after its
    group's last test (tests/e2e/conftest.py) and is never started twice."""
    for item in items:
        group = server_group(item.nodeid)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    first: dict[str, int] = {}
    order = {}
    for index, item in enumerate(items):
        group = server_group(item.nodeid)
        order[item.nodeid] = index if group is None else first.setdefault(group, index)
    items.sort(key=lambda item: order[item.nodeid])
