"""kill_stale against real processes: ours die, anything unproven survives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from specsweep.config.command import LaunchCommand
from specsweep.errors import StaleProcessError
from specsweep.targets.cleanup import kill_stale
from specsweep.targets.local import LocalRunner
from tests.conftest import free_port
from tests.faults.registry import fault

pytestmark = pytest.mark.integration

LISTEN = textwrap.dedent(
    """
    import socket, sys, time
    port = int(sys.argv[sys.argv.index("--port") + 1])
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen()
    time.sleep(600)
    """
)


def listening(port: int) -> bool:
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr.port == port
        for c in psutil.net_connections("tcp")
    )


def spawn(*argv: str, port: int | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, *argv], start_new_session=True)
    end = time.monotonic() + 20
    while port is not None and not listening(port):
        assert time.monotonic() < end, "listener did not come up"
        time.sleep(0.05)
    return proc


def gone(proc: subprocess.Popen) -> bool:
    try:
        proc.wait(timeout=10)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_kills_same_user_sglang_listener_and_spares_other_ports(tmp_path, procs):
    port, other = free_port(), free_port()
    ours = spawn("-c", LISTEN, "sglang.launch_server", "--port", str(port), port=port)
    elsewhere = spawn("-c", LISTEN, "sglang.launch_server", "--port", str(other), port=other)
    procs += [ours, elsewhere]
    report = kill_stale(LocalRunner(tmp_path), port, grace_s=5)
    assert ours.pid in report.killed_pids and gone(ours)
    assert elsewhere.poll() is None  # another server of this user, on another port


@fault(
    "Port held by a foreign process",
    injected="a process that is not an sglang server of this user listens on server.port",
    outcome=(
        "`StaleProcessError` naming its pid, user and command before anything is "
        "launched; it survives; `force` kills it"
    ),
)
def test_foreign_listener_blocks_unless_forced(tmp_path, procs):
    port = free_port()
    foreign = spawn("-m", "http.server", "--bind", "127.0.0.1", str(port), port=port)
    procs.append(foreign)
    with pytest.raises(StaleProcessError, match=rf"port {port} is held by .*http.server"):
        kill_stale(LocalRunner(tmp_path), port)
    assert foreign.poll() is None
    report = kill_stale(LocalRunner(tmp_path), port, force=True, grace_s=5)
    assert foreign.pid in report.killed_pids and gone(foreign)
    assert any("force" in note for note in report.notes)


def test_recorded_group_of_a_crashed_run_is_killed(tmp_path):
    first = LocalRunner(tmp_path)  # a flow that launched, then died before teardown
    handle = first.start(
        LaunchCommand((sys.executable, "-c", "import time; time.sleep(600)")),
        tmp_path / "s.log",
        port=free_port(),
    )
    report = kill_stale(LocalRunner(tmp_path), free_port(), grace_s=5)
    assert handle.pid in report.killed_pids
    assert not psutil.pid_exists(handle.pid) or psutil.Process(handle.pid).status() == "zombie"
    assert LocalRunner(tmp_path).state.entries() == []


def test_stale_record_of_a_dead_group_is_forgotten(tmp_path):
    runner = LocalRunner(tmp_path)
    handle = runner.start(LaunchCommand((sys.executable, "-c", "pass")), tmp_path / "s.log", 1)
    end = time.monotonic() + 10
    while runner.is_alive(handle) and time.monotonic() < end:
        time.sleep(0.05)
    assert kill_stale(runner, free_port()).killed == []
    assert runner.state.entries() == []
