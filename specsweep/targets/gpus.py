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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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


def find_nvidia_smi(executable: str | os.PathLike[str] | None = None) -> str | None:
    """The nvidia-smi to run: the explicit one, else the first on PATH, else None."""
    if executable is not None:
        path = os.fspath(executable)
        return path if os.access(path, os.X_OK) else shutil.which(path)
    return shutil.which("nvidia-smi")


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in ln.split(",")] for ln in text.splitlines() if ln.strip()]


def _int(cell: str) -> int | None:
    try:
        return int(float(cell))
    except ValueError:
        return None  # "[N/A]", "[Insufficient Permissions]"


def _run(exe: str, args: Sequence[str], timeout_s: float) -> str:
    try:
        out = subprocess.run(
            [exe, *args], capture_output=True, text=True, timeout=timeout_s, check=False
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
    gpu_csv = _run(exe, [f"--query-gpu={GPU_QUERY}", CSV], timeout_s)
    app_csv = _run(exe, [f"--query-compute-apps={APP_QUERY}", CSV], timeout_s)
    return parse(gpu_csv, app_csv)


def memory_used(
    executable: str, gpus: Sequence[int] | None = None, timeout_s: float = 15.0
) -> dict[int, int]:
    """memory.used per GPU index with one cheap call (the memory-release poll)."""
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
