"""The simulator's process tree: sglang's names, death with the launcher, orphans, GPU memory."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from specsweep.sim.gpu_inventory import Inventory
from tests.integration.sim.sim_proc import (
    free_port,
    is_gone,
    probe,
    running,
    spawn,
    stop,
    wait_children,
    wait_ready,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("orphans")]

TP2 = ("sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1")


def used_mib(tmp_path) -> list[int]:
    inv = Inventory(tmp_path / "gpus")
    charged = inv.charged()
    return [inv.used_mib(g, charged) for g in inv.gpus()]


def test_children_carry_sglang_names_in_cmdline_and_comm(tmp_path):
    port = free_port()
    with running(port, "--tp", "2", log=tmp_path / "server.log") as proc:
        wait_ready(f"http://127.0.0.1:{port}", proc)
        kids = wait_children(proc, 3)
        assert sorted(k.name() for k in kids) == list(TP2)
        for kid in kids:
            assert kid.cmdline()[0] in TP2  # what ps, pgrep -f and nvidia-smi show
            comm = Path(f"/proc/{kid.pid}/comm").read_text().strip()
            assert comm == kid.name()[:15]  # the kernel's 15-character name
            assert kid.ppid() == proc.pid
        launcher = " ".join(psutil.Process(proc.pid).cmdline())
        assert "specsweep.sim.launch_server" in launcher and "--tp 2" in launcher
        # each scheduler holds its GPU: mem_fraction_static 0.88 of an H200 + context
        assert used_mib(tmp_path) == [round(143771 * 0.88) + 520] * 2


def test_single_rank_scheduler_has_no_suffix(tmp_path):
    port = free_port()
    with running(port, log=tmp_path / "server.log") as proc:
        names = sorted(k.name() for k in wait_children(proc, 2))
        assert names == ["sglang::detokenizer", "sglang::scheduler"]


def ignores_sigterm(pid: int) -> bool:
    """SIGTERM's disposition is "ignore" (/proc's SigIgn mask): a TERM cannot end it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_children_die_with_the_launcher(tmp_path, how):
    port = free_port()
    proc = spawn(port, "--tp", "2", log=tmp_path / "server.log")
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc)
        kids = wait_children(proc, 3)
        if how == "sigterm":  # graceful: the launcher kills and reaps its children
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(5) == 0
        else:  # only the launcher, not its group: the kernel's parent-death signal
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
        wait_until(lambda: all(is_gone(k.pid) for k in kids), 10, "children to die")
        wait_until(lambda: used_mib(tmp_path) == [0, 0], 10, "GPU memory to be released")
    finally:
        stop(proc)


def test_orphan_survives_the_group_kill_holds_memory_and_blocks_the_next_launch(tmp_path):
    port = free_port()
    gpus = str(tmp_path / "gpus")
    proc = spawn(port, log=tmp_path / "a.log", SPECSWEEP_SIM_ORPHAN="1")
    orphan = None
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc)
        kids = {k.name(): k for k in wait_children(proc, 2)}
        orphan, detok = kids["sglang::scheduler"], kids["sglang::detokenizer"]
        assert os.getsid(orphan.pid) != os.getsid(proc.pid)  # its own session
        os.killpg(proc.pid, signal.SIGTERM)  # what a careful cleanup sends first
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        wait_until(lambda: is_gone(detok.pid), 10, "the detokenizer to die")
        # reparented when the launcher died, the moment a parent-death signal would fire;
        # the group kill could not reach it (another group), and TERM is ignored
        wait_until(lambda: orphan.ppid() != proc.pid, 10, "the orphan to be reparented")
        assert os.getpgid(orphan.pid) != proc.pid and ignores_sigterm(orphan.pid)
        assert not is_gone(orphan.pid)
        assert used_mib(tmp_path)[0] > 100_000  # still holding its ~124 GB
        # The next server on this GPU fails to load, as on a real host.
        port2 = free_port()
        env = {"SPECSWEEP_SIM_GPU_STATE": gpus, "SPECSWEEP_SIM_GPU_CHECK_MEMORY": "1"}
        with running(port2, log=tmp_path / "b.log", **env) as second:
            assert second.wait(15) == -signal.SIGKILL
        text = (tmp_path / "b.log").read_text()
        assert "torch.OutOfMemoryError: CUDA out of memory" in text
        assert "GPU 0 has a total capacity of 140.40 GiB" in text
        assert probe(f"http://127.0.0.1:{port2}") == "refused"
        orphan.send_signal(signal.SIGTERM)  # ignored: its disposition, not a race
        assert ignores_sigterm(orphan.pid) and not is_gone(orphan.pid)
        orphan.send_signal(signal.SIGKILL)
        wait_until(lambda: is_gone(orphan.pid), 5, "the orphan to die")
        wait_until(lambda: used_mib(tmp_path) == [0], 10, "the orphan's memory to be freed")
    finally:
        stop(proc)
        if orphan is not None and not is_gone(orphan.pid):
            orphan.kill()


def test_more_ranks_than_gpus_fail_like_cuda(tmp_path):
    Inventory(tmp_path / "gpus").ensure("NVIDIA H200", 1, 143771)
    port = free_port()
    with running(port, "--tp", "2", log=tmp_path / "server.log") as proc:
        assert proc.wait(15) == -signal.SIGKILL
    assert "CUDA error: invalid device ordinal" in (tmp_path / "server.log").read_text()
