"""SSH targets against a real OpenSSH server on 127.0.0.1: the simulator launched on
the "remote" host, waited for, benchmarked there, cleaned up and torn down."""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import (
    ConfigError,
    ServerDiedError,
    ServerStartTimeout,
    SshAuthError,
    SshConnectError,
)
from specsweep.pipeline import kill_stale_servers
from specsweep.results.store import ResultsStore
from specsweep.sim.gpu_inventory import Inventory
from specsweep.sim.nvidia_smi import BIN_DIR
from specsweep.targets import host_for, ssh
from tests.conftest import sim_config_data
from tests.faults.registry import fault
from tests.integration.sim_server import variant_server

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
    host = host_for(config.target)
    assert isinstance(host, ssh.SshHost)
    server = variant_server(config, BASELINE, "run-ssh")
    server.kill_stale()
    handle = server.launch()
    try:
        assert str(handle.log_path).startswith(str(tmp_path / "remote"))
        assert _alive(handle.pid)
        # detached: its own session, no controlling terminal, stdin closed
        proc = psutil.Process(handle.pid)
        assert handle.pgid == handle.pid and proc.terminal() is None
        states = []
        report = server.wait_for_health(on_progress=lambda s, ln: states.append(s))
        assert report.transitions[-1][1] == "ready"
        assert server.facts is not None and server.facts.simulated
        seen = []
        row = server.benchmark_level(2, lambda d, t: seen.append(d))
        assert row["status"] == "ok" and row["completed"] == config.load.num_requests(2)
        assert row["gpu_host"] == socket.gethostname()  # asked on the host (here: loopback)
        assert seen and seen[-1] == config.load.num_requests(2)  # progress streamed back
        assert ResultsStore(config.results_dir).has_level("run-ssh", "baseline", 2)
    finally:
        server.teardown()
    assert not _alive(handle.pid)
    state = tmp_path / "remote" / "launched.json"
    assert state.read_text().strip() == "[]"


def test_kill_stale_over_ssh_stops_a_leftover_server(tmp_path, port, sshd):
    config = ssh_config(tmp_path, port, sshd)
    with variant_server(config, BASELINE, "leftover") as server:  # its exit: the safety net
        server.kill_stale()
        handle = server.launch()
        ssh.host_for(config.target).close()  # the orchestrator that started it is gone
        report = kill_stale_servers(config)
        assert handle.pid in report.killed_pids
        assert not _alive(handle.pid)


def test_crash_while_loading_fails_fast_with_the_log_tail(tmp_path, port, sshd):
    data = sim_config_data(tmp_path, port)
    data["target"] = sshd.target(tmp_path / "remote")
    data["server"]["env"]["SPECSWEEP_SIM_CRASH"] = "load"
    config = parse_config(data)
    server = variant_server(config, BASELINE, "crash")
    server.kill_stale()
    server.launch()
    try:
        with pytest.raises(ServerDiedError) as info:
            server.wait_for_health()
        assert info.value.log_tail, "the error carries the remote log's last lines"
        assert "127.0.0.1" in str(info.value)
    finally:
        server.teardown()


def test_drive_from_orchestrator_measures_from_here(tmp_path, port, sshd):
    config = ssh_config(tmp_path, port, sshd, drive_from="orchestrator")
    server = variant_server(config, BASELINE, "orch")
    server.kill_stale()
    server.launch()
    try:
        server.wait_for_health()
        row = server.benchmark_level(1)
        assert row["status"] == "ok"
    finally:
        server.teardown()


def _load_generators(port: int) -> list[psutil.Process]:
    """The load generators on the host driving the server on `port`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "specsweep.loadgen" in cmd and f":{port}" in cmd and _alive(proc.pid):
            found.append(proc)
    return found


@fault(
    "SSH connection lost mid-level",
    injected=(
        "the sshd process serving the orchestrator's connection is SIGKILLed while a level "
        "runs, its load generator stopped (SIGSTOP: it cannot notice the lost channel)"
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
    server = variant_server(config, BASELINE, "drop")
    server.kill_stale()
    handle = server.launch()
    dropped: list[int] = []
    lost: list[psutil.Process] = []
    lock = threading.Lock()
    try:
        server.wait_for_health()

        def drop_once(done: int, total: int) -> None:
            with lock:
                if done > 0 and not dropped:
                    # a lost load generator that would die of the closed channel by itself
                    # proves nothing: stopped, only the operation id can find and end it
                    lost.extend(_load_generators(port))
                    for proc in lost:
                        proc.suspend()
                    client_port = host.connection().transport.sock.getsockname()[1]
                    dropped.extend(sshd.drop_connections(client_port))

        row = server.benchmark_level(4, drop_once)
        assert dropped, "the test did not manage to drop the connection"
        assert lost, "the test did not find the load generator on the host"
        assert row["status"] == "ok" and row["failed"] == 0
        assert row["completed"] == config.load.num_requests(4)
        assert [p.pid for p in lost if _alive(p.pid)] == [], "the lost load generator runs on"
    finally:
        for proc in lost:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        server.teardown()
    assert not _alive(handle.pid)


def test_unknown_host_key_is_refused_with_the_fix(tmp_path, port, sshd):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = ssh_config(tmp_path, port, sshd, known_hosts=str(empty))
    with pytest.raises(SshAuthError, match="ssh-keyscan -p"):
        kill_stale_servers(config)
    assert not (tmp_path / "remote" / "lib").exists()  # refused before anything was copied
    insecure = ssh_config(tmp_path, port, sshd, known_hosts=str(empty), verify_host_key=False)
    report = kill_stale_servers(insecure)  # explicit opt-out: connects
    assert report.killed_pids == []  # the host's agent answered ...
    assert any((tmp_path / "remote" / "lib").iterdir())  # ... from the copied package


def test_wrong_key_and_closed_port_give_clear_errors(tmp_path, port, sshd):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(SshAuthError, match="authentication failed"):
        kill_stale_servers(ssh_config(tmp_path, port, sshd, key_file=str(other)))
    closed = ssh_config(tmp_path, port, sshd, port=port, connect_attempts=1)  # nothing on it
    with pytest.raises(SshConnectError, match="refused"):
        kill_stale_servers(closed)


def test_missing_remote_python_is_a_config_error(tmp_path, port, sshd):
    config = ssh_config(tmp_path, port, sshd, python="/nonexistent/python3")
    with pytest.raises(ConfigError, match=r"target\.python"):
        kill_stale_servers(config)


def test_hang_ends_at_the_timeout_with_the_last_log_line(tmp_path, port, sshd):
    data = sim_config_data(tmp_path, port)
    data["target"] = sshd.target(tmp_path / "remote")
    data["server"].update(startup_timeout_s=2)
    data["server"]["env"]["SPECSWEEP_SIM_LOAD_SECONDS"] = "600"
    config = parse_config(data)
    server = variant_server(config, BASELINE, "hang")
    server.kill_stale()
    handle = server.launch()
    try:
        with pytest.raises(ServerStartTimeout, match="not ready after 2s") as info:
            server.wait_for_health()
        # The remote log's latest lines as they stood when the wait gave up (the server
        # may log on since, on a loaded machine at any pace): a contiguous run of its lines.
        tail = info.value.log_tail
        logged = [ln for ln in handle.log_path.read_text().splitlines() if ln.strip()]
        assert logged[0].startswith("# specsweep launch:") and tail
        assert any(logged[i : i + len(tail)] == tail for i in range(len(logged)))
    finally:
        server.teardown()


def test_a_bare_remote_python_is_a_config_error_naming_the_module(tmp_path, port, sshd):
    # This interpreter without its site-packages: a python3 the sglang venv's modules miss.
    bare = tmp_path / "bare-python3"
    bare.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    bare.chmod(0o755)
    config = ssh_config(tmp_path, port, sshd, python=str(bare))
    with pytest.raises(ConfigError, match=r"lacks a module .*No module named "):
        kill_stale_servers(config)


@pytest.mark.xdist_group("orphans")
def test_teardown_over_ssh_kills_the_orphaned_scheduler_and_waits_for_its_memory(
    tmp_path, port, sshd
):
    """The host's agent does the whole teardown there: group, orphan, GPU memory."""
    from tests.integration.test_gpu_cleanup import H200_MIB, alive

    state = tmp_path / "gpus"
    inv = Inventory(state)
    inv.ensure("NVIDIA H200", 2, H200_MIB)
    # The "remote" python sees the simulator's GPUs and its nvidia-smi, as a GPU host would.
    python = tmp_path / "gpu-host-python3"
    python.write_text(
        "#!/bin/sh\n"
        f'export PATH={shlex.quote(str(BIN_DIR))}:"$PATH"\n'
        f"export SPECSWEEP_SIM_GPU_STATE={shlex.quote(str(state))}\n"
        f"export SPECSWEEP_SIM_PYTHON={shlex.quote(sys.executable)}\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    python.chmod(0o755)
    data = sim_config_data(tmp_path, port)
    data["target"] = sshd.target(tmp_path / "remote", python=str(python))
    data["server"].update(stop_grace_s=1)
    data["server"]["env"].update(SPECSWEEP_SIM_ORPHAN="1", CUDA_VISIBLE_DEVICES="0")
    config = parse_config(data)
    with variant_server(config, BASELINE, "ssh-orphan") as server:
        server.kill_stale()
        server.launch()
        server.wait_for_health()
        (orphan,) = [a.pid for a in inv.charged() if alive(a.pid)]
        held = inv.used_mib(inv.gpus()[0])
        report = server.teardown()
    try:
        assert report is not None and report.leftover_pids == [orphan] and not alive(orphan)
        assert report.memory_before == {0: held} and report.release_s is not None
        assert report.released_mib >= held - report.memory_limit[0]
        assert inv.used_mib(inv.gpus()[0]) == 0
    finally:
        for a in inv.charged():  # whatever this test's inventory still lists is this test's
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(a.pid).kill()


def test_an_adaptive_variant_over_ssh(tmp_path, port, sshd):
    """The version asked on the host, the tiers file copied there, the step trace read back."""
    from specsweep.config import Variant
    from specsweep.config.versions import SglangVersion
    from specsweep.errors import UnsupportedByVersion
    from specsweep.pipeline import check_target_version

    load = {"output_len": 64, "requests_per_stream": 4, "phases": "together"}
    data = sim_config_data(tmp_path, port, load=load)
    data["target"] = sshd.target(tmp_path / "remote")
    # Streams long enough that a full batch of 8 fills most of the level: with 16-token
    # answers, two per stream, the ragged start and end (batches under 8, so steps 1) took
    # over half the level's time on a loaded machine (0.47 at steps 0 with 3 test workers).
    # The streams in step: at spread phases (the default) every end dips the batch under 8
    # on its own until its replacement is admitted, and the server spent 0.41 of a level at
    # steps 0 (a loaded CI machine, 2026-12-06): real traffic's behaviour, but not the
    # full-batch tier this test reads back.
    config = parse_config(data)
    variant = Variant(
        algorithm="EAGLE3", draft_model_path="sim/d", adaptive={"tiers": {1: [1], 8: [0]}}
    )
    assert check_target_version(config, [variant]) == SglangVersion("0.5.23", "simulator")
    old = config.model_copy(
        update={"server": config.server.model_copy(
            update={"env": {**config.server.env, "SPECSWEEP_SIM_SGLANG_VERSION": "0.5.9"}})}
    )  # fmt: skip
    with pytest.raises(UnsupportedByVersion, match=r"ssh-test has sglang 0\.5\.9"):
        check_target_version(old, [variant])

    with variant_server(config, variant, "run-adaptive") as server:
        server.kill_stale()
        server.launch()
        path = tmp_path / "remote" / "adaptive" / f"{variant.adaptive.digest}.json"
        assert str(path) in server.command.argv  # the host's resolved workdir
        assert path.is_file() and not list(path.parent.glob("*.tmp"))
        server.wait_for_health()
        one = server.benchmark_level(1)
        eight = server.benchmark_level(8)
    assert one["adaptive"] and one["adaptive_config"] == variant.adaptive.config_json()
    assert json.loads(one["adaptive_steps_share"]) == {"1": 1.0}
    assert json.loads(eight["adaptive_steps_share"]).get("0", 0) >= 0.5
