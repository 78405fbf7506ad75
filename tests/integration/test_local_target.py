"""Real processes and signals: detached start, zombie-aware liveness, group kill."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import psutil
import pytest

from specsweep.config.command import LaunchCommand
from specsweep.targets.handle import tail_file
from specsweep.targets.local import LocalRunner
from specsweep.targets.process import group_members, is_running, kill_group

pytestmark = pytest.mark.integration

# A "launcher" with two children, one of which ignores SIGTERM, like a wedged scheduler.
TREE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    stubborn = sys.argv[1] == "stubborn"
    handler = "signal.SIG_IGN" if stubborn else "signal.SIG_DFL"
    # One write per line: the server runs unbuffered (PYTHONUNBUFFERED=1), and print()
    # writes the line and its newline apart, so two children's lines could interleave.
    child = (
        f"import os, signal, time; signal.signal(signal.SIGTERM, {handler}); "
        "os.write(1, b'child up\\\\n'); time.sleep(600)"
    )
    kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
    print("launcher up", os.getpid(), flush=True)
    time.sleep(600)
    """
)


def wait_for(pred, timeout=60.0):  # a process start on a loaded 2-core machine
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def runner(tmp_path):
    return LocalRunner(tmp_path / "work")


def start_tree(runner, tmp_path, mode="normal"):
    cmd = LaunchCommand(
        (sys.executable, "-c", TREE, mode), {"SPECSWEEP_TEST_SECRET_TOKEN": "s3cr3t-value"}
    )
    handle = runner.start(cmd, tmp_path / "logs" / "server.log", port=1)
    assert wait_for(lambda: len(group_members(handle.pgid)) == 3)
    return handle


def test_start_detached_logs_and_records(runner, tmp_path):
    handle = start_tree(runner, tmp_path)
    try:
        assert handle.pgid == handle.pid and handle.pgid != os.getpgid(0)
        assert os.getsid(handle.pid) == handle.pid  # its own session: no terminal signals
        assert wait_for(lambda: "launcher up" in "\n".join(runner.tail(handle)))
        assert runner.tail(handle)[0].startswith("# specsweep launch:")
        log_text = handle.log_path.read_text()
        assert "s3cr3t-value" not in log_text and "SECRET_TOKEN=***" in log_text
        assert [e["pgid"] for e in runner.state.entries()] == [handle.pgid]
        assert runner.is_alive(handle)
    finally:
        runner.stop(handle, grace_s=5)
    assert runner.state.entries() == []


def test_group_kill_takes_children_and_orphans(runner, tmp_path):
    handle = start_tree(runner, tmp_path)
    kids = [p.pid for p in group_members(handle.pgid) if p.pid != handle.pid]
    os.kill(handle.pid, 9)  # the launcher dies first: its children become orphans
    assert wait_for(lambda: not runner.is_alive(handle))
    assert all(psutil.pid_exists(k) for k in kids)
    report = runner.stop(handle, grace_s=5)
    assert sorted(report.terminated) == sorted(kids) and not report.escalated
    assert group_members(handle.pgid) == []


def test_sigterm_ignored_escalates_to_sigkill(runner, tmp_path):
    handle = start_tree(runner, tmp_path, "stubborn")
    try:
        assert wait_for(lambda: runner.tail(handle).count("child up") == 2)
        report = kill_group(handle.pgid, grace_s=0.5)
        assert report.escalated and len(report.killed) == 2
        assert group_members(handle.pgid) == []
        assert not runner.is_alive(handle)
    finally:  # a failed assertion must not leave the SIGTERM-proof tree running
        kill_group(handle.pgid, grace_s=0)


def test_zombie_counts_as_dead(tmp_path):
    # A child that exits but is not waited for stays a zombie; it is not alive.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
                    if psutil.pid_exists(pid) else True)  # fmt: skip
    assert not is_running(pid)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() != "running"


def test_pid_reuse_is_detected():
    me = psutil.Process()
    assert is_running(me.pid, me.create_time())
    assert not is_running(me.pid, me.create_time() - 100)


def test_refuses_to_signal_own_group():
    with pytest.raises(ValueError, match="refusing"):
        kill_group(os.getpgid(0))


def test_tail_file_handles_missing_and_partial(tmp_path):
    assert tail_file(tmp_path / "nope.log") == []
    log = tmp_path / "x.log"
    log.write_bytes(b"a\n\nb\r\nc\xff partial")
    assert tail_file(log, 2) == ["b", "c\ufffd partial"]
