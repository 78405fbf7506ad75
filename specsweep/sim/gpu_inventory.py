"""A simulated GPU inventory on disk, shared by simulated servers and ``nvidia-smi``.

specsweep must kill stale servers and then *confirm on the GPUs* that their memory is
free (orphaned schedulers hold ~100 GB; a killed process's memory is released a
moment later). To test that without GPUs, every simulated scheduler is charged GPU
memory here, and the nvidia-smi stand-in reads it. The rule that makes it faithful: an
allocation counts only while its process is alive (not a zombie, same start time, so
PID reuse cannot fake it) plus a short release delay after the process is first seen
dead, so killing a process frees its memory as on a real driver.

Layout of the state directory (``SPECSWEEP_SIM_GPU_STATE``)::

    gpus.json              {"driver_version", "cuda_version", "gpus": [{index, uuid, name,
                            memory_total_mib, bus_id}]}  (created by the first server)
    procs/<pid>-<gpu>.json {pid, gpu, used_mib, start_ticks, name, release_s, dead_since}

Standard library only (and Linux ``/proc``): the nvidia-smi stand-in runs under
whatever ``python3`` is on PATH.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from specsweep.sim.knobs import ENV_GPU_STATE

DRIVER_VERSION = "570.133.20"
CUDA_VERSION = "12.8"
_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """The inventory directory: ``SPECSWEEP_SIM_GPU_STATE`` or one per user under tmp."""
    env = os.environ if env is None else env
    explicit = (env.get(ENV_GPU_STATE) or "").strip()
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"specsweep-sim-gpus-{os.getuid()}"


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    bus_id: str


@dataclass
class Allocation:
    pid: int
    gpu: int
    used_mib: int
    start_ticks: int | None
    name: str
    release_s: float = 0.3
    dead_since: float | None = None


def process_start_ticks(pid: int) -> int | None:
    """Start time of a live, non-zombie process (clock ticks since boot); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_name(pid: int) -> str | None:
    """What nvidia-smi shows as process_name: argv[0] (a setproctitle title included)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    first = raw.split(b"\0", 1)[0].decode(errors="replace").strip()
    return first or None


class Inventory:
    """The GPUs of one simulated machine and the memory charged to its processes."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = state_dir() if root is None else Path(root)
        self.procs = self.root / "procs"

    # --- GPUs -------------------------------------------------------------------
    def gpus(self) -> list[Gpu]:
        """The machine's GPUs; empty when no simulated server has created it yet."""
        try:
            data = json.loads((self.root / "gpus.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return []
        return [Gpu(**g) for g in data["gpus"]]

    def versions(self) -> tuple[str, str]:
        try:
            data = json.loads((self.root / "gpus.json").read_text())
            return data["driver_version"], data["cuda_version"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return DRIVER_VERSION, CUDA_VERSION

    def ensure(self, name: str, count: int, memory_mib: int, grow: bool = False) -> list[Gpu]:
        """Create the machine if it does not exist yet. An existing one is kept as is,
        unless ``grow``: then GPUs like its last one are added up to ``count``."""
        gpus = self.gpus()
        if gpus and (not grow or len(gpus) >= count):
            return gpus
        self.procs.mkdir(parents=True, exist_ok=True)
        if gpus:
            name, memory_mib = gpus[-1].name, gpus[-1].memory_total_mib
        gpus += [
            Gpu(i, _gpu_uuid(self.root, i), name, memory_mib, _bus_id(i))
            for i in range(len(gpus), count)
        ]
        driver, cuda = self.versions()
        data = {"driver_version": driver, "cuda_version": cuda, "gpus": [asdict(g) for g in gpus]}
        tmp = self.root / f".gpus.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        try:
            if grow:
                os.replace(tmp, self.root / "gpus.json")
            else:
                os.link(tmp, self.root / "gpus.json")  # first creator wins, atomically
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return self.gpus()

    # --- allocations ------------------------------------------------------------
    def allocate(
        self, pid: int, gpu: int, used_mib: int, release_s: float, name: str | None = None
    ) -> None:
        """Charge (or re-charge) ``used_mib`` on ``gpu`` to a live process."""
        alloc = Allocation(
            pid, gpu, int(used_mib), process_start_ticks(pid),
            name or process_name(pid) or "python", release_s,
        )  # fmt: skip
        self._write(alloc)

    def mark_dead(self, pid: int, when: float | None = None) -> None:
        """Start the release clock of a process known to have exited (its reaper knows)."""
        for alloc in self._read_all():
            if alloc.pid == pid and alloc.dead_since is None:
                alloc.dead_since = time.time() if when is None else when
                self._write(alloc)

    def charged(self, now: float | None = None) -> list[Allocation]:
        """Allocations that still hold memory; forgets those fully released."""
        now = time.time() if now is None else now
        out = []
        for alloc in self._read_all():
            if alloc.dead_since is None:
                ticks = process_start_ticks(alloc.pid)
                if ticks is not None and (alloc.start_ticks in (None, ticks)):
                    out.append(alloc)
                    continue
                alloc.dead_since = now
                self._write(alloc)
            if now < alloc.dead_since + alloc.release_s:
                out.append(alloc)
            else:
                self._path(alloc).unlink(missing_ok=True)
        return sorted(out, key=lambda a: (a.gpu, a.pid))

    def used_mib(self, gpu: Gpu, charged: list[Allocation] | None = None) -> int:
        """memory.used of one GPU: the sum of its charges, at most its capacity."""
        charged = self.charged() if charged is None else charged
        used = sum(a.used_mib for a in charged if a.gpu == gpu.index)
        return min(used, gpu.memory_total_mib)

    def _path(self, alloc: Allocation) -> Path:
        return self.procs / f"{alloc.pid}-{alloc.gpu}.json"

    def _write(self, alloc: Allocation) -> None:
        self.procs.mkdir(parents=True, exist_ok=True)
        path = self._path(alloc)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(alloc)))
        os.replace(tmp, path)

    def _read_all(self) -> list[Allocation]:
        out = []
        for path in sorted(self.procs.glob("*.json")) if self.procs.is_dir() else []:
            try:
                out.append(Allocation(**json.loads(path.read_text())))
            except (FileNotFoundError, json.JSONDecodeError, TypeError):
                continue  # removed or replaced while we looked
        return out


def _gpu_uuid(root: Path, index: int) -> str:
    """Stable per machine and index, in nvidia's ``GPU-xxxxxxxx-xxxx-...`` form."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"specsweep-sim:{root.resolve()}:{index}"))


def _bus_id(index: int) -> str:
    bus = _BUS_IDS[index] if index < len(_BUS_IDS) else f"{0xE0 + index:02X}"
    return f"00000000:{bus}:00.0"
