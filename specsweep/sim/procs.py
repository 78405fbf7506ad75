"""The simulated server's process tree and the GPU memory its schedulers hold.

Mirrors sglang's layout so that cleanup code finds what it would find on a GPU host:
the launcher keeps its command line and serves HTTP; one scheduler per (dp, tp) rank
named like sglang's ``run_scheduler_process`` names them (``sglang::scheduler`` plus
``_DP{d}`` when dp > 1, ``_PP{p}`` when pp > 1, ``_TP{t}`` when tp > 1, ``_EP{e}`` when
ep > 1), a ``sglang::detokenizer``, and with dp > 1 a
``sglang::data_parallel_controller``. Each scheduler is charged GPU memory in the
simulated inventory as loading proceeds (CUDA context, weights, KV cache).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import specsweep
from specsweep.sim.child import STARTED
from specsweep.sim.gpu_inventory import Gpu, Inventory
from specsweep.sim.knobs import SimKnobs
from specsweep.sim.perf_model import PerfProfile


@dataclass
class Child:
    title: str
    proc: subprocess.Popen[bytes]
    gpu: int | None = None  # schedulers only
    orphan: bool = False


def scheduler_title(args: Mapping[str, Any], dp_rank: int | None, tp_rank: int) -> str:
    """sglang's process title for one scheduler rank."""
    prefix = ""
    if dp_rank is not None:
        prefix += f" DP{dp_rank}"
    if int(args["pp_size"]) > 1:
        prefix += " PP0"
    tp, ep = int(args["tp_size"]), int(args["ep_size"])
    if tp > 1:
        prefix += f" TP{tp_rank}"
    if ep > 1:
        prefix += f" EP{tp_rank // max(1, tp // ep)}"
    return "sglang::scheduler" + prefix.replace(" ", "_")


def log_prefix(args: Mapping[str, Any]) -> str:
    """The ``[time TP0]`` part of a TP-rank-0 log line (empty without parallelism)."""
    title = scheduler_title(args, 0 if int(args["dp_size"]) > 1 else None, 0)
    return title.removeprefix("sglang::scheduler").replace("_", " ")


class ProcessTree:
    """Spawns, charges and kills the launcher's simulated children."""

    def __init__(
        self, args: Mapping[str, Any], knobs: SimKnobs, profile: PerfProfile, inv: Inventory
    ) -> None:
        self.args = args
        self.knobs = knobs
        self.profile = profile
        self.inv = inv
        self.children: list[Child] = []
        dp, tp = int(args["dp_size"]), int(args["tp_size"])
        self.ranks = [(d if dp > 1 else None, t) for d in range(dp) for t in range(tp)]

    @property
    def gpus_needed(self) -> int:
        return len(self.ranks)

    def spawn(self) -> None:
        """Start every child (sglang starts them before any weight is loaded)."""
        orphan = self.knobs.orphan
        for i, (dp_rank, tp_rank) in enumerate(self.ranks):
            is_orphan = orphan == "all" or (orphan == "scheduler" and i == 0)
            title = scheduler_title(self.args, dp_rank, tp_rank)
            self.children.append(Child(title, self._start(title, is_orphan), i, is_orphan))
        if int(self.args["dp_size"]) > 1:
            title = "sglang::data_parallel_controller"
            self.children.append(Child(title, self._start(title, False)))
        title = "sglang::detokenizer"
        self.children.append(Child(title, self._start(title, False)))

    def wait_started(self, timeout_s: float = 30.0) -> None:
        """Block until every child has said it started (specsweep/sim/child.py): named,
        in its own session if an orphan, its signals set. Raises RuntimeError if one
        exits or stays silent for timeout_s."""
        deadline = time.monotonic() + timeout_s
        for child in self.children:
            out = child.proc.stdout
            assert out is not None
            while True:
                ready, _, _ = select.select([out], [], [], 0.1)
                if ready:
                    line = out.readline()
                    out.close()
                    if line == STARTED:
                        break
                    raise RuntimeError(f"{child.title} exited before it started")
                if child.proc.poll() is not None:
                    raise RuntimeError(f"{child.title} exited before it started")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{child.title} did not start in {timeout_s:.0f} s")

    def _start(self, title: str, orphan: bool) -> subprocess.Popen[bytes]:
        root = str(Path(specsweep.__file__).resolve().parents[1])
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
        argv = [sys.executable, "-m", "specsweep.sim.child", "--title", title]
        argv += ["--parent", str(os.getpid())] + (["--orphan"] if orphan else [])
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL if orphan else subprocess.PIPE,
            stdout=subprocess.PIPE,  # its one line: started (wait_started)
            env=env,
        )

    # --- GPU memory -------------------------------------------------------------
    def schedulers(self) -> list[Child]:
        return [c for c in self.children if c.gpu is not None]

    def full_mib(self, gpu: Gpu) -> int:
        """What one scheduler ends up holding: the static fraction plus its context."""
        fraction = float(self.args["mem_fraction_static"])
        return round(gpu.memory_total_mib * fraction) + self.profile.cuda_context_mib

    def charge(self, gpus: list[Gpu], share: float) -> None:
        """Charge each scheduler ``share`` of its static memory (plus the context)."""
        for child in self.schedulers():
            assert child.gpu is not None
            gpu = gpus[child.gpu]
            static = self.full_mib(gpu) - self.profile.cuda_context_mib
            used = self.profile.cuda_context_mib + round(static * share)
            release = self.knobs.gpu_release_s
            self.inv.allocate(child.proc.pid, gpu.index, used, release, child.title)

    def shortfall(self, gpus: list[Gpu]) -> tuple[Gpu, int, int] | None:
        """(gpu, free MiB, needed MiB) of the first GPU without room for its scheduler."""
        mine = {c.proc.pid for c in self.children}
        charged = [a for a in self.inv.charged() if a.pid not in mine]
        for child in self.schedulers():
            assert child.gpu is not None
            gpu = gpus[child.gpu]
            free = gpu.memory_total_mib - sum(a.used_mib for a in charged if a.gpu == gpu.index)
            if free < self.full_mib(gpu):
                return gpu, free, self.full_mib(gpu)
        return None

    # --- teardown ---------------------------------------------------------------
    def kill(self, timeout_s: float = 2.0) -> None:
        """SIGKILL every child but orphans (sglang's kill_process_tree), reap them, and
        start their GPU memory's release clock."""
        victims = [c for c in self.children if not c.orphan and c.proc.poll() is None]
        for child in victims:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        for child in self.children:
            if child.orphan:
                continue
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                continue
            if child.gpu is not None:
                self.inv.mark_dead(child.proc.pid)
