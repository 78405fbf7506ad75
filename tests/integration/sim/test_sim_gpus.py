"""The simulated GPU inventory and the nvidia-smi stand-in, in nvidia-smi's exact formats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specsweep.sim.gpu_inventory import Inventory, process_start_ticks
from specsweep.sim.nvidia_smi import BIN_DIR, run
from tests.integration.sim.sim_proc import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process to charge GPU memory to (argv[0] is what nvidia-smi shows)."""
    proc = subprocess.Popen(["sleep", "30"])
    # Popen returns once exec has closed the child's close-on-exec pipe, which the kernel
    # does before it renames the process: its name can still read "python" (seen in CI)
    proc_dir = Path(f"/proc/{proc.pid}")
    wait_until(
        lambda: (
            (proc_dir / "comm").read_text().strip() == "sleep"
            and (proc_dir / "cmdline").read_bytes().startswith(b"sleep\0")
        ),
        10,
        "sleep's exec",
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Inventory:
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_STATE", str(tmp_path / "gpus"))
    monkeypatch.delenv("SPECSWEEP_SIM_GPU_HIDE_PIDS", raising=False)
    inv = Inventory(tmp_path / "gpus")
    inv.ensure("NVIDIA H200", 2, 143771)
    return inv


def smi(*argv: str) -> str:
    code, lines, err = run(argv)
    assert code == 0, err
    return "\n".join(lines)


def test_query_gpu_formats(machine, sleeper):
    u0, u1 = (g.uuid for g in machine.gpus())
    assert u0.startswith("GPU-") and [len(p) for p in u0[4:].split("-")] == [8, 4, 4, 4, 12]
    machine.allocate(sleeper.pid, 1, 130004, 0.3)
    q = "--query-gpu=index,uuid,name,memory.used,memory.total"
    assert smi(q, "--format=csv") == (
        "index, uuid, name, memory.used [MiB], memory.total [MiB]\n"
        f"0, {u0}, NVIDIA H200, 0 MiB, 143771 MiB\n"
        f"1, {u1}, NVIDIA H200, 130004 MiB, 143771 MiB"
    )
    assert smi(q, "--format=csv,noheader,nounits") == (
        f"0, {u0}, NVIDIA H200, 0, 143771\n1, {u1}, NVIDIA H200, 130004, 143771"
    )
    assert smi("--query-gpu=memory.total,index", "--format=csv,noheader", "-i", "1") == (
        "143771 MiB, 1"
    )
    assert smi("--query-gpu", "index,memory.free", "--format", "csv,nounits") == (
        "index, memory.free [MiB]\n0, 143771\n1, 13767"
    )
    assert smi("-L") == (f"GPU 0: NVIDIA H200 (UUID: {u0})\nGPU 1: NVIDIA H200 (UUID: {u1})")
    assert smi("-L", "-i", u1) == f"GPU 1: NVIDIA H200 (UUID: {u1})"


def test_query_compute_apps_formats(machine, sleeper):
    u0, u1 = (g.uuid for g in machine.gpus())
    machine.allocate(sleeper.pid, 0, 1234, 0.3)
    machine.allocate(os.getpid(), 1, 2048, 0.3)
    me = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[0].decode()
    q = "--query-compute-apps=pid,process_name,used_memory,gpu_uuid"
    assert smi(q, "--format=csv") == (
        "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n"
        f"{sleeper.pid}, sleep, 1234 MiB, {u0}\n"
        f"{os.getpid()}, {me}, 2048 MiB, {u1}"
    )
    assert smi(q, "--format=csv,noheader,nounits", "-i", "0") == (
        f"{sleeper.pid}, sleep, 1234, {u0}"
    )
    assert smi(
        "--query-compute-apps=gpu_uuid,used_gpu_memory", "--format=csv,noheader", "-i", "1"
    ) == (f"{u1}, 2048 MiB")


def test_no_processes_prints_only_the_header(machine):
    q = "--query-compute-apps=pid,process_name,used_memory"
    assert smi(q, "--format=csv") == "pid, process_name, used_gpu_memory [MiB]"
    assert smi(q, "--format=csv,noheader") == ""
    assert "No running processes found" in smi()


def test_container_mode_hides_pids_but_counts_memory(machine, sleeper, monkeypatch):
    machine.allocate(sleeper.pid, 0, 5000, 0.3)
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_HIDE_PIDS", "1")
    assert smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader") == ""
    assert smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits") == "0, 5000\n1, 0"


def test_errors_look_like_nvidia_smi(machine, tmp_path):
    code, lines, err = run(["--query-gpu=index,bogus", "--format=csv"])
    assert (code, lines) == (2, []) and 'Field "bogus" is not a valid field to query.' in err
    code, _, err = run(["--query-gpu=index", "--format=csv", "-i", "7"])
    assert code == 6 and "No devices were found" in err
    code, _, err = run(["-L"], Inventory(tmp_path / "empty"))
    assert code == 6 and "No devices were found" in err


def test_memory_counts_only_while_the_process_lives(machine):
    proc = subprocess.Popen(["sleep", "30"])
    machine.allocate(proc.pid, 0, 7000, release_s=0.5)
    assert [a.pid for a in machine.charged()] == [proc.pid]
    proc.send_signal(signal.SIGKILL)
    wait_until(lambda: process_start_ticks(proc.pid) is None, 5)  # a zombie holds nothing
    seen_dead = time.time()
    assert [a.pid for a in machine.charged(now=seen_dead)] == [proc.pid]  # release delay
    assert machine.charged(now=seen_dead + 0.6) == []  # released, and forgotten
    proc.wait()
    assert list((machine.root / "procs").glob("*.json")) == []


def test_a_reused_pid_does_not_inherit_memory(machine, sleeper):
    machine.allocate(sleeper.pid, 0, 7000, release_s=0.0)
    path = next((machine.root / "procs").glob("*.json"))
    path.write_text(path.read_text().replace('"start_ticks": ', '"start_ticks": 1'))
    assert machine.charged() == []


def test_the_shim_on_path_runs_the_stand_in(machine, sleeper, tmp_path):
    machine.allocate(sleeper.pid, 1, 4321, 0.3)
    env = {
        **os.environ,
        "PATH": f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}",
        "SPECSWEEP_SIM_PYTHON": sys.executable,
    }
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path, check=True,
    )  # fmt: skip
    assert out.stdout == f"{sleeper.pid}, 4321\n"
    env.pop("SPECSWEEP_SIM_PYTHON")  # any python3 on PATH will do: stdlib only
    out = subprocess.run(
        ["nvidia-smi", "-L"], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.count("NVIDIA H200 (UUID: GPU-") == 2
    module = subprocess.run(
        [sys.executable, "-m", "specsweep.sim.nvidia_smi", "--query-gpu=count", "--format=csv"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert module.stdout == "count\n2\n2\n"


def test_a_named_machine_is_fixed_and_the_scratch_machine_grows(tmp_path):
    inv = Inventory(tmp_path / "m")
    first = inv.ensure("NVIDIA H200", 1, 143771)
    assert len(inv.ensure("NVIDIA H100 80GB HBM3", 4, 81559)) == 1  # the machine is what it is
    grown = inv.ensure("NVIDIA H100 80GB HBM3", 4, 81559, grow=True)
    assert [g.index for g in grown] == [0, 1, 2, 3] and grown[0] == first[0]
    assert {(g.name, g.memory_total_mib) for g in grown} == {("NVIDIA H200", 143771)}
    assert len({g.uuid for g in grown}) == 4
