"""``nvidia-smi`` stand-in over the simulated GPU inventory (``gpu_inventory``).

specsweep's cleanup and whatever a user scripts around it ask nvidia-smi which
processes hold GPU memory and how much is used; this answers the same questions in
nvidia-smi's exact CSV conventions, so code tested against it runs on a GPU host:

    nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv
    pid, process_name, used_gpu_memory [MiB], gpu_uuid
    4242, sglang::scheduler_TP0, 128502 MiB, GPU-1c5e...

``--format=csv,noheader,nounits`` drops the header and the units; fields are joined
by ", ". Supported: ``--query-gpu=`` (index, uuid, name, pci.bus_id, memory.total,
memory.used, memory.free, count, driver_version, utilization.gpu,
utilization.memory, timestamp), ``--query-compute-apps=`` (pid, process_name,
used_memory / used_gpu_memory, gpu_uuid, gpu_name, gpu_bus_id, timestamp), ``-L``,
``-i IDX[,IDX]`` (index, UUID or bus id) and the plain summary table.
``SPECSWEEP_SIM_GPU_HIDE_PIDS`` in the environment is container mode: no processes
are listed while memory.used still counts them.

Run as ``python -m specsweep.sim.nvidia_smi`` or put ``BIN_DIR`` first on PATH (it
holds an executable ``nvidia-smi`` shim running ``$SPECSWEEP_SIM_PYTHON`` or
``python3``). Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specsweep.sim.gpu_inventory import Allocation, Gpu, Inventory, process_name
from specsweep.sim.knobs import ENV_GPU_HIDE_PIDS, env_bool

BIN_DIR = Path(__file__).resolve().parent / "bin"

INVALID_ARGS = 2  # nvidia-smi's "invalid argument" status
NOT_FOUND = 6  # "a query to find an object was unsuccessful"

if TYPE_CHECKING:  # aliases stay out of runtime: the shim may run an older python3
    Row = tuple[Gpu, Allocation | None]
    _Field = tuple[str, str, Callable[["_Ctx", Row], object]]  # header, unit, getter


class _Ctx:
    """What the field getters need: the inventory, its charges and the clock."""

    def __init__(self, inv: Inventory) -> None:
        self.inv = inv
        self.charged = inv.charged()
        self.gpus = inv.gpus()
        self.driver, self.cuda = inv.versions()
        now = time.time()
        self.stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now))
        self.stamp += f".{int(now * 1000) % 1000:03d}"

    def used(self, gpu: Gpu) -> int:
        return self.inv.used_mib(gpu, self.charged)


def _app(row: Row) -> Allocation:
    alloc = row[1]
    assert alloc is not None
    return alloc


GPU_FIELDS: dict[str, _Field] = {
    "timestamp": ("timestamp", "", lambda c, r: c.stamp),
    "driver_version": ("driver_version", "", lambda c, r: c.driver),
    "count": ("count", "", lambda c, r: len(c.gpus)),
    "index": ("index", "", lambda c, r: r[0].index),
    "uuid": ("uuid", "", lambda c, r: r[0].uuid),
    "name": ("name", "", lambda c, r: r[0].name),
    "pci.bus_id": ("pci.bus_id", "", lambda c, r: r[0].bus_id),
    "memory.total": ("memory.total", "MiB", lambda c, r: r[0].memory_total_mib),
    "memory.used": ("memory.used", "MiB", lambda c, r: c.used(r[0])),
    "memory.free": ("memory.free", "MiB", lambda c, r: r[0].memory_total_mib - c.used(r[0])),
    "utilization.gpu": ("utilization.gpu", "%", lambda c, r: 0),
    "utilization.memory": ("utilization.memory", "%", lambda c, r: 0),
}
GPU_FIELDS["gpu_name"] = GPU_FIELDS["name"]
GPU_FIELDS["gpu_uuid"] = GPU_FIELDS["uuid"]
GPU_FIELDS["gpu_bus_id"] = GPU_FIELDS["pci.bus_id"]

APP_FIELDS: dict[str, _Field] = {
    "timestamp": ("timestamp", "", lambda c, r: c.stamp),
    "pid": ("pid", "", lambda c, r: _app(r).pid),
    "process_name": ("process_name", "", lambda c, r: process_name(_app(r).pid) or _app(r).name),
    "used_gpu_memory": ("used_gpu_memory", "MiB", lambda c, r: _app(r).used_mib),
    "gpu_uuid": ("gpu_uuid", "", lambda c, r: r[0].uuid),
    "gpu_name": ("gpu_name", "", lambda c, r: r[0].name),
    "gpu_bus_id": ("gpu_bus_id", "", lambda c, r: r[0].bus_id),
}
APP_FIELDS["used_memory"] = APP_FIELDS["used_gpu_memory"]


def csv_lines(fields: Sequence[_Field], rows: Sequence[Row], ctx: _Ctx, fmt: set[str]) -> list[str]:
    """nvidia-smi's CSV: ", "-joined, ``name [unit]`` headers and ``value unit`` cells."""
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(f"{h} [{u}]" if u else h for h, u, _ in fields))
    for row in rows:
        cells = []
        for _, unit, get in fields:
            value = get(ctx, row)
            cells.append(f"{value} {unit}" if unit and "nounits" not in fmt else str(value))
        lines.append(", ".join(cells))
    return lines


def _select(gpus: list[Gpu], ids: str | None) -> list[Gpu] | None:
    if ids is None:
        return gpus
    picked = []
    for key in (k.strip() for k in ids.split(",")):
        match = [g for g in gpus if key in (str(g.index), g.uuid, g.bus_id)]
        if not match:
            return None
        picked += [g for g in match if g not in picked]
    return sorted(picked, key=lambda g: g.index)


def _table(ctx: _Ctx, gpus: list[Gpu], apps: list[Row]) -> list[str]:
    """A compact imitation of the default summary (humans read it, scripts use CSV)."""
    bar = "+" + "-" * 89 + "+"
    out = [
        time.strftime("%a %b %d %H:%M:%S %Y"),
        bar,
        f"| NVIDIA-SMI {ctx.driver:<22} Driver Version: {ctx.driver:<14} "
        f"CUDA Version: {ctx.cuda:<9}|",
        bar,
        "| GPU  Name" + " " * 31 + "|           Memory-Usage | GPU-Util  Compute M. |",
    ]
    for g in gpus:
        usage = f"{ctx.used(g)}MiB / {g.memory_total_mib}MiB"
        out.append(f"| {g.index:>3}  {g.name[:34]:<34} | {usage:>22} |      0%      Default |")
    out += [bar, "", bar, "| Processes:" + " " * 78 + "|"]
    out.append("|  GPU        PID   Type   Process name" + " " * 40 + "GPU Memory |")
    if not apps:
        out.append("|  No running processes found" + " " * 61 + "|")
    for gpu, alloc in apps:
        assert alloc is not None
        name = (process_name(alloc.pid) or alloc.name)[:46]
        out.append(
            f"|  {gpu.index:>3} {alloc.pid:>10}      C   {name:<46} {alloc.used_mib:>12}MiB |"
        )
    out.append(bar)
    return out


def run(argv: Sequence[str], inv: Inventory | None = None) -> tuple[int, list[str], str]:
    """Answer one nvidia-smi command line: (exit status, stdout lines, stderr text)."""
    opts: dict[str, str] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in ("-L", "--list-gpus"):
            opts["list"] = ""
        elif name in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id"):
            if not eq:
                if not args:
                    return INVALID_ARGS, [], f"Option {name} requires a value.\n"
                value = args.pop(0)
            opts["id" if name in ("-i", "--id") else name.lstrip("-")] = value
        else:
            return (
                INVALID_ARGS,
                [],
                (
                    f"Invalid combination of input arguments ({arg}). "
                    "Please run 'nvidia-smi -h' for help.\n"
                ),
            )
    ctx = _Ctx(inv or Inventory())
    if not ctx.gpus:
        return NOT_FOUND, [], "No devices were found\n"
    gpus = _select(ctx.gpus, opts.get("id"))
    if gpus is None:
        return NOT_FOUND, [], "No devices were found\n"
    hide = env_bool(os.environ, ENV_GPU_HIDE_PIDS)
    by_index = {g.index: g for g in gpus}
    apps: list[Row] = [(by_index[a.gpu], a) for a in ctx.charged if a.gpu in by_index]
    apps = [] if hide else apps
    if "list" in opts:
        return 0, [f"GPU {g.index}: {g.name} (UUID: {g.uuid})" for g in gpus], ""
    query = "query-gpu" if "query-gpu" in opts else "query-compute-apps"
    if query not in opts:
        return 0, _table(ctx, gpus, apps), ""
    fmt = {f.strip() for f in opts.get("format", "").split(",")}
    if "csv" not in fmt:
        return INVALID_ARGS, [], "'--format' must be specified as csv when querying.\n"
    table = GPU_FIELDS if query == "query-gpu" else APP_FIELDS
    fields = []
    for key in (k.strip() for k in opts[query].split(",")):
        if key not in table:
            return INVALID_ARGS, [], f'Field "{key}" is not a valid field to query.\n\n'
        fields.append(table[key])
    rows: list[Row] = [(g, None) for g in gpus] if query == "query-gpu" else apps
    return 0, csv_lines(fields, rows, ctx, fmt), ""


def main(argv: Sequence[str] | None = None) -> int:
    code, lines, err = run(sys.argv[1:] if argv is None else argv)
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    if err:
        sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main())
