"""kill_stale on a (simulated) GPU host: real processes, real signals, the simulator's
GPU inventory and its nvidia-smi stand-in first on PATH.

Each test gets its own inventory of two H200s, so parallel runs never collide, and
every process it started is SIGKILLed at the end whatever happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from specsweep.config import SweepConfig
from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import GpuMemoryNotReleased, StaleProcessError
from specsweep.results.store import ResultsStore
from specsweep.sim.gpu_inventory import Inventory
from specsweep.sim.nvidia_smi import BIN_DIR
from specsweep.targets.cleanup import kill_stale
from specsweep.targets.gpus import simulated_gpus
from specsweep.targets.local import LocalRunner
from specsweep.targets.teardown import stop_server
from tests.conftest import FAST_SIM_ENV, free_port, sim_config_data
from tests.faults.registry import fault
from tests.integration.sim_server import variant_server
from tests.integration.test_cleanup import LISTEN, listening
from tests.needs import missing

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("orphans")]

H200_MIB = 143771


class Host:
    """The simulated GPU host of one test and everything started on it."""

    def __init__(self, root: Path) -> None:
        self.inv = Inventory(root)
        self.inv.ensure("NVIDIA H200", 2, H200_MIB)
        self.procs: list[subprocess.Popen[bytes]] = []

    def used(self, gpu: int) -> int:
        return self.inv.used_mib(self.inv.gpus()[gpu])

    def sim_server(self, port: int, *, tp: int = 1, orphan: str | None = None) -> int:
        """A simulated sglang server, not recorded anywhere: only its port, its names
        and its GPU memory give it away. Returns the launcher's pid once it listens."""
        env = {**os.environ, **FAST_SIM_ENV}
        if orphan:
            env["SPECSWEEP_SIM_ORPHAN"] = orphan
        argv = [sys.executable, "-m", "specsweep.sim.launch_server", "--model-path", "sim/llama"]
        argv += ["--tp", str(tp), "--port", str(port)]
        proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
        self.procs.append(proc)
        end = time.monotonic() + 20
        while not listening(port):
            assert proc.poll() is None, "simulated server died"
            assert time.monotonic() < end, "simulated server did not come up"
            time.sleep(0.05)
        return proc.pid

    def holder(
        self, gpu: int, mib: int, *argv: str, user: int | None = None, exe: str | None = None
    ) -> int:
        """A process charged ``mib`` on ``gpu``: anything, renamed (``argv[0]`` run as
        ``exe``) or another user's."""
        preexec = (lambda: os.setuid(user)) if user is not None else None
        proc = subprocess.Popen(
            list(argv), executable=exe, start_new_session=True, preexec_fn=preexec
        )
        self.procs.append(proc)
        self.inv.allocate(proc.pid, gpu, mib, release_s=0.3, name=argv[0])
        return proc.pid

    def charged_pids(self) -> set[int]:
        return {a.pid for a in self.inv.charged()}

    def close(self) -> None:
        pids = {p.pid for p in self.procs} | self.charged_pids()
        for pid in pids:  # this test's inventory: every pid in it is this test's
            try:
                proc = psutil.Process(pid)
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        for p in self.procs:
            p.wait(timeout=10)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_STATE", str(tmp_path / "gpus"))
    monkeypatch.setenv("SPECSWEEP_SIM_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}")
    h = Host(tmp_path / "gpus")
    try:
        yield h
    finally:
        h.close()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def orphan_of(host: Host, launcher: int) -> int:
    """Kill a launcher's group the way a crashed flow's teardown would; the orphaned
    scheduler (own session, SIGTERM ignored) survives with its memory."""
    os.killpg(launcher, signal.SIGTERM)
    end = time.monotonic() + 10
    while alive(launcher) and time.monotonic() < end:
        time.sleep(0.05)
    survivors = [pid for pid in host.charged_pids() if alive(pid)]
    assert len(survivors) == 1, survivors
    assert psutil.Process(survivors[0]).cmdline()[0].startswith("sglang::scheduler")
    return survivors[0]


def test_ours_killed_launcher_and_children_memory_released(host, tmp_path):
    port = free_port()
    launcher = host.sim_server(port, tp=2)
    children = [c.pid for c in psutil.Process(launcher).children()]
    assert host.used(0) > 100_000 and host.used(1) > 100_000
    report = kill_stale(LocalRunner(tmp_path / "w"), port, grace_s=5, memory_timeout_s=10)
    assert launcher in report.killed_pids
    assert not any(alive(pid) for pid in [launcher, *children])
    assert report.gpu_checked and report.memory_before[0] > 100_000
    assert all(report.memory_after[g] <= report.memory_limit[g] for g in (0, 1))
    assert report.release_s is not None and report.timeline


@fault(
    "Orphaned schedulers from a previous run",
    injected=(
        "`SPECSWEEP_SIM_ORPHAN=1`: `sglang::scheduler_TP0` outlives its launcher in its "
        "own session, ignores SIGTERM and keeps its GPU memory"
    ),
    outcome=(
        "kill-stale finds it through nvidia-smi on the target GPU, SIGTERM then SIGKILL, "
        "and waits until the GPU memory is released"
    ),
)
def test_orphan_scheduler_found_on_gpu_and_killed(host, tmp_path):
    port = free_port()
    orphan = orphan_of(host, host.sim_server(port, orphan="1"))
    assert host.used(0) > 100_000
    report = kill_stale(LocalRunner(tmp_path / "w"), port, gpus=[0], grace_s=1)
    assert orphan in report.killed_pids and not alive(orphan)
    assert report.memory_after[0] <= report.memory_limit[0] and host.used(0) == 0


def test_foreign_gpu_process_blocks_and_survives_unless_forced(host, tmp_path):
    sleeper = host.holder(0, 8000, "sleep", "600")  # not sglang: not provably ours
    with pytest.raises(StaleProcessError, match=rf"pid {sleeper} \(user \w+; 8000 MiB on GPU 0"):
        kill_stale(LocalRunner(tmp_path / "w"), free_port(), gpus=[0])
    assert alive(sleeper)
    report = kill_stale(LocalRunner(tmp_path / "w"), free_port(), gpus=[0], force=True, grace_s=2)
    assert sleeper in report.killed_pids and not alive(sleeper)
    assert any("force" in n for n in report.notes)


def test_other_users_gpu_process_blocks_even_with_an_sglang_name(host, tmp_path):
    if os.getuid() != 0:
        missing("ROOT", "starting another user's process needs root")
    sleep = shutil.which("sleep")
    other = host.holder(0, 4000, "sglang::scheduler_TP0", "600", user=65534, exe=sleep)
    with pytest.raises(StaleProcessError, match=rf"pid {other} \(user nobody"):
        kill_stale(LocalRunner(tmp_path / "w"), free_port(), gpus=[0])
    assert alive(other)


def test_same_user_sglang_on_other_gpu_and_port_survives(host, tmp_path):
    other_port = free_port()
    theirs = host.holder(
        1, 20000, sys.executable, "-c", LISTEN, "sglang.launch_server", "--port", str(other_port)
    )
    port = free_port()
    launcher = host.sim_server(port)  # ours: GPU 0
    report = kill_stale(LocalRunner(tmp_path / "w"), port, gpus=[0], grace_s=5)
    assert launcher in report.killed_pids and alive(theirs)
    assert any(str(theirs) in s and "not on target GPUs" in s for s in report.spared)
    assert host.used(1) == 20000


def test_container_mode_falls_back_to_names_with_a_warning(host, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_HIDE_PIDS", "1")
    port = free_port()
    orphan = orphan_of(host, host.sim_server(port, orphan="1"))
    report = kill_stale(LocalRunner(tmp_path / "w"), port, gpus=[0], grace_s=1)
    assert report.pids_hidden and orphan in report.killed_pids and not alive(orphan)
    assert any("no processes" in w for w in report.warnings)
    assert "no processes (container?)" in caplog.text
    assert report.memory_after[0] <= report.memory_limit[0]


def test_memory_wait_times_out_naming_the_holder(host, tmp_path):
    sleeper = host.holder(0, 6000, "sleep", "600")
    runner = LocalRunner(tmp_path / "w")
    report = kill_stale(runner, free_port(), gpus=[0], tolerate_foreign_gpu=True)
    assert report.memory_limit[0] == 6000 + 1024 and alive(sleeper)  # baseline = theirs
    with pytest.raises(GpuMemoryNotReleased, match=rf"GPU 0: 6000 MiB used.*pid {sleeper}"):
        kill_stale(
            runner, free_port(), gpus=[0], tolerate_foreign_gpu=True,
            max_used_mib=1000, memory_timeout_s=0.3,
        )  # fmt: skip
    assert alive(sleeper)


def test_no_nvidia_smi_skips_gpu_steps(tmp_path):
    report = kill_stale(LocalRunner(tmp_path), free_port(), nvidia_smi=tmp_path / "absent")
    assert not report.gpu_checked and report.memory_limit == {}
    assert any("GPU checks skipped" in n for n in report.notes)


def test_gpu_proof_script_passes_in_simulate_mode():
    """The script the lead runs on a real H200, exercised here against the simulator."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "benchmarks/gpu_cleanup_proof.py", "--simulate", "--grace", "0.5"],
        cwd=root, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS" in out.stdout and "StaleProcessError" in out.stdout


def orphan_config(tmp_path: Path, port: int, **server: object) -> SweepConfig:
    """A baseline on GPU 0 whose sglang::scheduler_TP0 outlives its launcher."""
    env = {**FAST_SIM_ENV, "SPECSWEEP_SIM_ORPHAN": "1", "CUDA_VISIBLE_DEVICES": "0"}
    data = sim_config_data(tmp_path, port, server={"env": env, "stop_grace_s": 1, **server})
    return parse_config(data)


def crash_launcher(launcher: int, orphan: int) -> None:
    """SIGKILL the launcher; wait until its orphan is reparented (out of its tree)."""
    os.kill(launcher, signal.SIGKILL)
    end = time.monotonic() + 10
    while psutil.Process(orphan).ppid() == launcher and time.monotonic() < end:
        time.sleep(0.05)


def scheduler_pid(host: Host) -> int:
    (pid,) = [a.pid for a in host.inv.charged() if alive(a.pid)]
    assert psutil.Process(pid).cmdline()[0].startswith("sglang::scheduler")  # tp 1: no _TP0
    return pid


@fault(
    "Orphaned scheduler at the end of the last variant",
    injected=(
        "`SPECSWEEP_SIM_ORPHAN=1`: the scheduler moves to its own session, ignores SIGTERM "
        "and keeps ~120 GB on its GPU when its server group is stopped"
    ),
    outcome=(
        "the teardown itself finds it (a descendant of the launcher, listed before the group "
        "kill; by GPU or port if the launcher died first), SIGTERM then SIGKILL, and waits "
        "until the GPU's memory is back; its report says how much was released, so no sweep "
        "ends with the GPU full"
    ),
)
def test_teardown_kills_what_the_server_left_behind_and_waits_for_its_memory(host, tmp_path):
    config = orphan_config(tmp_path, free_port())
    with variant_server(config, BASELINE, "orphan-td") as server:
        server.kill_stale()
        server.launch()
        server.wait_for_health()
        orphan = scheduler_pid(host)
        assert os.getsid(orphan) == orphan  # not in the server's session: a group kill misses it
        held = host.used(0)
        assert held > 100_000
        report = server.teardown()
    assert report is not None and not alive(orphan)
    assert report.leftover_pids == [orphan] and "sglang::scheduler" in report.leftovers[0]
    assert report.gpus == [0] and report.memory_before[0] == held
    assert report.release_s is not None and report.memory_after[0] <= report.memory_limit[0]
    assert report.released_mib >= held - report.memory_limit[0] and host.used(0) == 0
    assert "released" in report.summary() and f"pid {orphan}" in report.summary()
    phases = ResultsStore(config.results_dir).read_phases("orphan-td")["baseline"]
    assert phases["gpu_mib_after_teardown"] == 0 and phases["gpu_mib_at_start"] == 0


def test_teardown_after_the_launcher_died_finds_its_orphan_by_gpu(host, tmp_path):
    """A crashed launcher: its orphan was reparented before the teardown could list it."""
    config = orphan_config(tmp_path, free_port())
    with variant_server(config, BASELINE, "crashed") as server:
        server.kill_stale()
        handle = server.launch()
        server.wait_for_health()
        orphan = scheduler_pid(host)
        crash_launcher(handle.pid, orphan)
        report = server.teardown()
    assert report is not None and report.leftover_pids == [orphan] and not alive(orphan)
    assert report.release_s is not None and host.used(0) == 0


def test_teardown_in_a_container_finds_a_dead_launchers_orphan_by_name(host, tmp_path, monkeypatch):
    """nvidia-smi lists no PIDs (a container) and the launcher died first: the orphaned
    sglang:: process of this user started after the launch is still found."""
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_HIDE_PIDS", "1")
    config = orphan_config(tmp_path, free_port())
    with variant_server(config, BASELINE, "hidden") as server:
        server.kill_stale()
        handle = server.launch()
        server.wait_for_health()
        orphan = scheduler_pid(host)
        launcher = psutil.Process(handle.pid)
        ours = {handle.pid} | {p.pid for p in launcher.children(recursive=True)}
        crash_launcher(handle.pid, orphan)
        report = server.teardown()
    assert report is not None and orphan in report.leftover_pids and not alive(orphan)
    # under load the launcher or the detokenizer, killed with it, may still be listed
    # when the teardown looks: they are this server's; nothing else may be touched
    assert set(report.leftover_pids) <= ours, (report.leftover_pids, ours)
    assert any("found by name" in n for n in report.notes) and host.used(0) == 0


def test_teardown_leaves_another_servers_processes_alone(host, tmp_path):
    """Same user, sglang names, same GPU, started later: a live server's, not this one's."""
    config = orphan_config(tmp_path, free_port())
    with variant_server(config, BASELINE, "mine") as server:
        server.kill_stale()
        server.launch()
        server.wait_for_health()
        other = host.sim_server(free_port())  # not launched by specsweep, its own port
        theirs = {p.pid for p in psutil.Process(other).children()} | {other}
        assert server.handle is not None
        report = stop_server(server.handle, [0], grace_s=1, memory_timeout_s=0.5)
        server.handle = None  # stopped here: nothing left for the `with` to stop
    assert report.leftover_pids and not set(report.leftover_pids) & theirs  # our orphan only
    assert all(alive(pid) for pid in theirs)
    # their memory is what stays: the limit counts it, and it is still held after the wait
    assert report.release_s is not None and report.memory_after[0] >= 100_000


def test_teardown_names_what_still_holds_the_memory(host, tmp_path):
    config = orphan_config(tmp_path, free_port())
    with variant_server(config, BASELINE, "held") as server:
        server.kill_stale()
        server.launch()
        server.wait_for_health()
        sleeper = host.holder(0, 9000, "sleep", "600")  # not ours, started meanwhile
        assert server.handle is not None and server.cleanup is not None
        limit = server.cleanup.memory_limit  # what the GPU held before the launch, + slack
        report = stop_server(
            server.handle, [0], memory_limit=limit, grace_s=1, memory_timeout_s=0.5
        )
        server.handle = None
    assert limit == {0: 1024} and report.release_s is None and alive(sleeper)
    assert any(f"pid {sleeper}" in h for h in report.holders)
    assert "NOT back under its limit" in report.summary() and f"pid {sleeper}" in report.summary()


def machine_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine nvidia-smi first on PATH (the stand-in's directory taken off it) that
    leaves a mark and fails: a simulator target must never ask it."""
    bin_dir = tmp_path / "machine-bin"
    bin_dir.mkdir()
    mark = tmp_path / "machine-nvidia-smi-called"
    exe = bin_dir / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho called >> {mark}\nexit 9\n")
    exe.chmod(0o755)
    rest = [p for p in os.environ["PATH"].split(os.pathsep) if p != str(BIN_DIR)]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *rest]))
    return mark


def test_a_simulator_target_reads_its_own_gpus_through_the_stand_in(host, tmp_path, monkeypatch):
    port = free_port()
    launcher = host.sim_server(port)  # charged in this test's inventory
    inventory = {"SPECSWEEP_SIM_GPU_STATE": os.environ["SPECSWEEP_SIM_GPU_STATE"]}
    monkeypatch.delenv("SPECSWEEP_SIM_GPU_STATE")  # named by the config's server.env only
    mark = machine_nvidia_smi(tmp_path, monkeypatch)
    outside = kill_stale(LocalRunner(tmp_path / "w"), free_port(), gpus=[0])
    assert any("nvidia-smi failed" in w for w in outside.warnings) and mark.exists()
    mark.unlink()

    with simulated_gpus(inventory) as gpus:
        assert gpus.nvidia_smi == str(BIN_DIR / "nvidia-smi")
        report = kill_stale(LocalRunner(tmp_path / "w"), port, gpus=[0], grace_s=5)
    assert not mark.exists()  # the machine's nvidia-smi was not asked
    assert report.gpu_checked and report.memory_before[0] > 100_000
    assert report.notes == [] and report.warnings == []  # no "nvidia-smi not found"
    assert launcher in report.killed_pids and not alive(launcher)
    assert report.memory_after[0] <= report.memory_limit[0] and host.used(0) == 0


def test_on_the_scratch_inventory_a_simulator_target_skips_gpu_checks_quietly(
    host, tmp_path, monkeypatch
):
    """The scratch inventory is every simulator's of this user: a server of another target
    on the same simulated GPU is not this target's to kill, nor its memory to wait for."""
    theirs = host.sim_server(free_port())  # another simulated target, on simulated GPU 0
    state = os.environ["SPECSWEEP_SIM_GPU_STATE"]
    monkeypatch.delenv("SPECSWEEP_SIM_GPU_STATE")  # nothing names an inventory
    mark = machine_nvidia_smi(tmp_path, monkeypatch)
    with simulated_gpus({}) as gpus:
        assert gpus.nvidia_smi is None and "scratch" in gpus.why
        report = kill_stale(LocalRunner(tmp_path / "w"), free_port(), grace_s=1)
    assert alive(theirs) and report.killed_pids == [] and not mark.exists()
    assert not report.gpu_checked and report.notes == [] and report.warnings == []

    # what GPU checks would do there: claim it, an sglang process of this user on a target GPU
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_STATE", state)
    with simulated_gpus({}):
        report = kill_stale(LocalRunner(tmp_path / "w"), free_port(), grace_s=1)
    assert theirs in report.killed_pids and not alive(theirs)


def test_a_simulated_machine_no_server_created_yet_holds_nothing(tmp_path, monkeypatch):
    """The first variant's kill-stale on a fresh inventory: no GPUs yet, nothing to free,
    no 'nvidia-smi failed: No devices were found'."""
    mark = machine_nvidia_smi(tmp_path, monkeypatch)
    unborn = {"SPECSWEEP_SIM_GPU_STATE": str(tmp_path / "unborn")}
    with simulated_gpus(unborn):
        report = kill_stale(LocalRunner(tmp_path / "w"), free_port(), gpus=[0])
    assert report.gpu_checked and report.memory_before == {} and report.memory_after == {}
    assert report.notes == [] and report.warnings == [] and not mark.exists()
