"""SSH targets against a real OpenSSH server on 127.0.0.1: the simulator launched on
the "remote" host, waited for, benchmarked there, cleaned up and torn down."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from specsweep import pipeline
from specsweep.config_file import parse_config
from specsweep.errors import (
    ConfigError,
    ServerDiedError,
    ServerStartTimeout,
    SshAuthError,
    SshConnectError,
)
from specsweep.plan import BASELINE
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore
from specsweep.targets import ssh
from tests.conftest import sim_config_data
from tests.faults.registry import fault

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def ssh_config(tmp_path: Path, server_port: int, sshd, **target: object):
    data = sim_config_data(tmp_path, server_port)
    data["target"] = sshd.target(tmp_path / "remote", **target)
    return parse_config(data)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_lifecycle_over_ssh(tmp_path, port, sshd):
    config = ssh_config(tmp_path, port, sshd)
    host = pipeline.host_for(config.target)
    assert isinstance(host, ssh.SshHost)
    pipeline.kill_stale_servers(config)
    handle = pipeline.launch(config, BASELINE, "run-ssh")
    try:
        assert str(handle.log_path).startswith(str(tmp_path / "remote"))
        assert _alive(handle.pid)
        # detached: its own session, no controlling terminal, stdin closed
        proc = psutil.Process(handle.pid)
        assert handle.pgid == handle.pid and proc.terminal() is None
        states = []
        report = pipeline.wait_ready(config, handle, on_progress=lambda s, ln: states.append(s))
        assert report.transitions[-1][1] == "ready"
        facts = pipeline.facts(config)
        assert facts.simulated
        ctx = RunContext("run-ssh", "step_sweep", "test", config.target.name)
        seen = []
        row = pipeline.measure_level(config, ctx, BASELINE, facts, 2, lambda d, t: seen.append(d))
        assert row["status"] == "ok" and row["completed"] == config.load.num_requests(2)
        assert row["gpu_host"] == socket.gethostname()  # asked on the host (here: loopback)
        assert seen and seen[-1] == config.load.num_requests(2)  # progress streamed back
        assert ResultsStore(config.results_dir).has_level("run-ssh", "baseline", 2)
    finally:
        pipeline.teardown(config, handle)
    assert not _alive(handle.pid)
    state = tmp_path / "remote" / "launched.json"
    assert state.read_text().strip() == "[]"


def test_kill_stale_over_ssh_stops_a_leftover_server(tmp_path, port, sshd):
    config = ssh_config(tmp_path, port, sshd)
    handle = pipeline.launch(config, BASELINE, "leftover")
    ssh.host_for(config.target).close()  # the orchestrator that started it is gone
    report = pipeline.kill_stale_servers(config)
    assert handle.pid in report.killed_pids
    assert not _alive(handle.pid)


def test_crash_while_loading_fails_fast_with_the_log_tail(tmp_path, port, sshd):
    data = sim_config_data(tmp_path, port)
    data["target"] = sshd.target(tmp_path / "remote")
    data["server"]["env"]["SPECSWEEP_SIM_CRASH"] = "load"
    config = parse_config(data)
    handle = pipeline.launch(config, BASELINE, "crash")
    try:
        with pytest.raises(ServerDiedError) as info:
            pipeline.wait_ready(config, handle)
        assert info.value.log_tail, "the error carries the remote log's last lines"
        assert "127.0.0.1" in str(info.value)
    finally:
        pipeline.teardown(config, handle)


def test_drive_from_orchestrator_measures_from_here(tmp_path, port, sshd):
    config = ssh_config(tmp_path, port, sshd, drive_from="orchestrator")
    handle = pipeline.launch(config, BASELINE, "orch")
    try:
        pipeline.wait_ready(config, handle)
        ctx = RunContext("orch", "step_sweep", "test", config.target.name)
        row = pipeline.measure_level(config, ctx, BASELINE, pipeline.facts(config), 1)
        assert row["status"] == "ok"
    finally:
        pipeline.teardown(config, handle)


@fault(
    "SSH connection lost mid-level",
    injected=(
        "the sshd process serving the orchestrator's connection is SIGKILLed while a level runs"
    ),
    outcome=(
        "specsweep reconnects, stops the lost load generator on the host by its operation"
        " id and measures the level again: every request completes; the server (own "
        "session) survived and is torn down"
    ),
)
def test_connection_dropped_mid_level_is_retried_after_reconnecting(tmp_path, port, sshd):
    data = sim_config_data(tmp_path, port)
    data["target"] = sshd.target(tmp_path / "remote")
    data["load"].update(output_len=64, requests_per_stream=4)
    config = parse_config(data)
    host = ssh.host_for(config.target)
    handle = pipeline.launch(config, BASELINE, "drop")
    dropped: list[int] = []
    lock = threading.Lock()
    try:
        pipeline.wait_ready(config, handle)

        def drop_once(done: int, total: int) -> None:
            with lock:
                if done > 0 and not dropped:
                    client_port = host.connection().transport.sock.getsockname()[1]
                    dropped.extend(sshd.drop_connections(client_port))

        ctx = RunContext("drop", "step_sweep", "test", config.target.name)
        facts = pipeline.facts(config)
        row = pipeline.measure_level(config, ctx, BASELINE, facts, 4, drop_once)
        assert dropped, "the test did not manage to drop the connection"
        assert row["status"] == "ok" and row["failed"] == 0
        assert row["completed"] == config.load.num_requests(4)
    finally:
        pipeline.teardown(config, handle)
    assert not _alive(handle.pid)


def test_unknown_host_key_is_refused_with_the_fix(tmp_path, port, sshd):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = ssh_config(tmp_path, port, sshd, known_hosts=str(empty))
    with pytest.raises(SshAuthError, match="ssh-keyscan -p"):
        pipeline.kill_stale_servers(config)
    insecure = ssh_config(tmp_path, port, sshd, known_hosts=str(empty), verify_host_key=False)
    pipeline.kill_stale_servers(insecure)  # explicit opt-out: connects


def test_wrong_key_and_closed_port_give_clear_errors(tmp_path, port, sshd):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(SshAuthError, match="authentication failed"):
        pipeline.kill_stale_servers(ssh_config(tmp_path, port, sshd, key_file=str(other)))
    closed = ssh_config(tmp_path, port, sshd, port=port, connect_attempts=1)  # nothing on it
    with pytest.raises(SshConnectError, match="refused"):
        pipeline.kill_stale_servers(closed)


def test_missing_remote_python_is_a_config_error(tmp_path, port, sshd):
    config = ssh_config(tmp_path, port, sshd, python="/nonexistent/python3")
    with pytest.raises(ConfigError, match=r"target\.python"):
        pipeline.kill_stale_servers(config)


def test_hang_ends_at_the_timeout_with_the_last_log_line(tmp_path, port, sshd):
    data = sim_config_data(tmp_path, port)
    data["target"] = sshd.target(tmp_path / "remote")
    data["server"].update(startup_timeout_s=2)
    data["server"]["env"]["SPECSWEEP_SIM_LOAD_SECONDS"] = "600"
    config = parse_config(data)
    handle = pipeline.launch(config, BASELINE, "hang")
    try:
        with pytest.raises(ServerStartTimeout, match="not ready after 2s") as info:
            pipeline.wait_ready(config, handle)
        assert info.value.log_tail[0].startswith("# specsweep launch:")  # the remote log
        assert "server_args=ServerArgs(" in info.value.log_tail[-1]  # its latest line
    finally:
        pipeline.teardown(config, handle)


def test_a_bare_remote_python_is_a_config_error_naming_the_module(tmp_path, port, sshd):
    # This interpreter without its site-packages: a python3 the sglang venv's modules miss.
    bare = tmp_path / "bare-python3"
    bare.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    bare.chmod(0o755)
    config = ssh_config(tmp_path, port, sshd, python=str(bare))
    with pytest.raises(ConfigError, match=r"lacks a module .*No module named "):
        pipeline.kill_stale_servers(config)
