"""What the GPUs hold right now, read from ``nvidia-smi``.

Stale-server cleanup needs two answers from the driver: which processes hold memory
on which GPU (to find orphaned ``sglang::scheduler`` processes that a process-group
kill misses), and how much memory each GPU has in use (to confirm the memory really
came back before the next server loads, since the driver frees it a moment after
the process dies). ``nvidia-smi``'s CSV output is the one interface present on every
GPU host (NVML's Python binding is an extra dependency), and the simulator ships a
stand-in with the same output, so the parsing lives here, in one place.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from specsweep.errors import GpuQueryError

log = logging.getLogger(__name__)

GPU_QUERY = "index,uuid,memory.used,memory.total"
APP_QUERY = "pid,process_name,used_memory,gpu_uuid"
CSV = "--format=csv,noheader,nounits"


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    used_mib: int
    total_mib: int


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on one GPU (a process on two GPUs appears twice)."""

    pid: int
    name: str
    used_mib: int | None  # nvidia-smi prints [N/A] where it may not look
    gpu: int
    gpu_uuid: str


@dataclass(frozen=True)
class GpuInventory:
    """One snapshot of the GPUs and their compute processes."""

    gpus: tuple[GpuInfo, ...]
    processes: tuple[GpuProcess, ...]

    def used_mib(self, gpus: Sequence[int] | None = None) -> dict[int, int]:
        """memory.used per GPU index, for the given GPUs (all when None)."""
        return {g.index: g.used_mib for g in self.gpus if gpus is None or g.index in gpus}

    def on(self, gpus: Sequence[int] | None) -> list[GpuProcess]:
        """The compute processes on those GPUs (all when None)."""
        return [p for p in self.processes if gpus is None or p.gpu in gpus]

    def pids_hidden(self, gpus: Sequence[int] | None, idle_mib: int) -> bool:
        """True when memory is in use but no process is listed: inside a container
        nvidia-smi cannot map the host's PIDs, so it shows none at all."""
        busy = any(used > idle_mib for used in self.used_mib(gpus).values())
        return busy and not self.on(gpus)

    def index_of(self, key: str) -> int | None:
        """A CUDA_VISIBLE_DEVICES token (an index or a GPU uuid) as an index."""
        key = key.strip()
        if key.isdigit():
            return int(key)
        for gpu in self.gpus:
            if gpu.uuid == key or (key.startswith("GPU-") and gpu.uuid.startswith(key)):
                return gpu.index
        return None


@dataclass(frozen=True)
class SimulatedGpus:
    """A simulator target's GPUs: the simulator's inventory, never the machine's real ones.

    ``nvidia_smi`` is the stand-in (``specsweep/sim/bin/nvidia-smi``) run with the
    simulated server's environment, so it reads the inventory that server charges; None
    when that inventory is the shared scratch one (no ``SPECSWEEP_SIM_GPU_STATE``): every
    simulator of this user on this machine charges the same simulated GPUs there (rank i
    on GPU i), so what they list is not this target's alone, and GPU checks would kill
    or wait on another target's servers (``why`` says so). A real nvidia-smi is never
    asked for a simulator target: its processes are not the simulator's.
    """

    nvidia_smi: str | None
    env: Mapping[str, str] = field(default_factory=dict)
    why: str = ""


_SIMULATED: ContextVar[SimulatedGpus | None] = ContextVar("specsweep_simulated_gpus", default=None)

SIM_GPU_STATE = "SPECSWEEP_SIM_GPU_STATE"  # specsweep.sim.knobs.ENV_GPU_STATE


def simulator_nvidia_smi() -> str:
    """The simulator's nvidia-smi stand-in, shipped with specsweep."""
    from specsweep.sim.nvidia_smi import BIN_DIR

    return str(BIN_DIR / "nvidia-smi")


def simulated_gpus_for(server_env: Mapping[str, str]) -> SimulatedGpus:
    """What a simulated server started with ``server_env`` (over this environment) calls
    its GPUs: its own inventory through the stand-in, or none on the scratch inventory."""
    env = {"SPECSWEEP_SIM_PYTHON": sys.executable, **os.environ, **server_env}
    if (env.get(SIM_GPU_STATE) or "").strip():
        return SimulatedGpus(simulator_nvidia_smi(), env)
    return SimulatedGpus(
        None,
        why=f"simulator on the shared scratch GPU inventory (no {SIM_GPU_STATE} in "
        "server.env): GPU checks skipped, the port and the launch record find its servers",
    )


@contextmanager
def simulated_gpus(server_env: Mapping[str, str]) -> Iterator[SimulatedGpus]:
    """Within: GPU queries of this thread ask the simulator, not a real nvidia-smi."""
    gpus = simulated_gpus_for(server_env)
    token = _SIMULATED.set(gpus)
    try:
        yield gpus
    finally:
        _SIMULATED.reset(token)


def simulated() -> SimulatedGpus | None:
    """The simulated GPUs in effect here, None for a real target."""
    return _SIMULATED.get()


def simulated_machine_unborn(exe: str) -> bool:
    """True when ``exe`` is a simulator target's stand-in and no simulated server has
    created its machine yet: it has no GPUs, so nothing holds any (the stand-in would
    answer "No devices were found", as a host without GPUs does)."""
    sim = _SIMULATED.get()
    if sim is None or sim.nvidia_smi != exe:
        return False
    from specsweep.sim.gpu_inventory import Inventory, state_dir

    return not Inventory(state_dir(sim.env)).gpus()


def find_nvidia_smi(executable: str | os.PathLike[str] | None = None) -> str | None:
    """The nvidia-smi to run: the explicit one, else a simulator target's stand-in (None on
    the scratch inventory), else the first on PATH, else None."""
    if executable is not None:
        path = os.fspath(executable)
        return path if os.access(path, os.X_OK) else shutil.which(path)
    sim = _SIMULATED.get()
    if sim is not None:
        return sim.nvidia_smi
    return shutil.which("nvidia-smi")


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in ln.split(",")] for ln in text.splitlines() if ln.strip()]


def _int(cell: str) -> int | None:
    try:
        return int(float(cell))
    except ValueError:
        return None  # "[N/A]", "[Insufficient Permissions]"


def _run(exe: str, args: Sequence[str], timeout_s: float) -> str:
    sim = _SIMULATED.get()
    env = dict(sim.env) if sim is not None and sim.nvidia_smi == exe else None
    try:
        out = subprocess.run(
            [exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise GpuQueryError(f"{exe} {' '.join(args)} did not answer in {timeout_s:.0f}s") from exc
    except OSError as exc:
        raise GpuQueryError(f"cannot run {exe}: {exc}") from exc
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip().splitlines()
        raise GpuQueryError(f"{exe} exited {out.returncode}: {msg[0] if msg else ''}")
    return out.stdout


def parse(gpu_csv: str, app_csv: str) -> GpuInventory:
    """Build a snapshot from the two CSV answers (``noheader,nounits``)."""
    gpus = []
    for row in _rows(gpu_csv):
        if len(row) < 4 or _int(row[0]) is None:
            raise GpuQueryError(f"unexpected nvidia-smi GPU row: {row}")
        gpus.append(GpuInfo(int(row[0]), row[1], _int(row[2]) or 0, _int(row[3]) or 0))
    by_uuid = {g.uuid: g.index for g in gpus}
    procs = []
    for row in _rows(app_csv):
        if len(row) < 4 or _int(row[0]) is None:
            continue  # "No running processes found" and the like
        gpu = by_uuid.get(row[-1])
        if gpu is None:
            continue  # a GPU outside this query (e.g. a MIG instance)
        name = ", ".join(row[1:-2])  # a process name may itself contain ", "
        procs.append(GpuProcess(int(row[0]), name, _int(row[-2]), gpu, row[-1]))
    return GpuInventory(tuple(gpus), tuple(procs))


def query(
    executable: str | os.PathLike[str] | None = None, timeout_s: float = 15.0
) -> GpuInventory | None:
    """A snapshot from nvidia-smi, or None when this host has no nvidia-smi."""
    exe = find_nvidia_smi(executable)
    if exe is None:
        return None
    if simulated_machine_unborn(exe):
        return GpuInventory((), ())
    gpu_csv = _run(exe, [f"--query-gpu={GPU_QUERY}", CSV], timeout_s)
    app_csv = _run(exe, [f"--query-compute-apps={APP_QUERY}", CSV], timeout_s)
    return parse(gpu_csv, app_csv)


def memory_used(
    executable: str, gpus: Sequence[int] | None = None, timeout_s: float = 15.0
) -> dict[int, int]:
    """memory.used per GPU index with one cheap call (the memory-release poll)."""
    if simulated_machine_unborn(executable):
        return {}
    rows = _rows(_run(executable, ["--query-gpu=index,memory.used", CSV], timeout_s))
    used = {int(r[0]): _int(r[1]) or 0 for r in rows if len(r) >= 2 and r[0].isdigit()}
    return {i: m for i, m in used.items() if gpus is None or i in gpus}


def gpus_from_env(
    env: Mapping[str, str], inventory: GpuInventory | None = None
) -> list[int] | None:
    """The GPU indices a server started with ``env`` may use (None: all of them).

    ``CUDA_VISIBLE_DEVICES`` holds indices or uuids; a uuid needs a snapshot to map,
    and one that cannot be mapped widens the answer to all GPUs (never narrower than
    the truth, so cleanup never overlooks a GPU the server will use).
    """
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None or not spec.strip():
        return None
    out: list[int] = []
    for token in spec.split(","):
        token = token.strip()
        index = int(token) if token.isdigit() else None
        if index is None and inventory is not None:
            index = inventory.index_of(token)
        if index is None:
            log.info("CUDA_VISIBLE_DEVICES token %r not resolved; considering all GPUs", token)
            return None
        out.append(index)
    return sorted(set(out))
