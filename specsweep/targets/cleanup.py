"""Kill stale servers before a launch, and never anything that is not provably ours.

"Ours" means: a process group specsweep recorded when it launched it, or an sglang
process (launcher or renamed ``sglang::*`` child) of this same user that serves this
port or holds memory on the target GPUs. Schedulers hold the GPU memory and can
outlive their launcher in a session of their own (sglang issue 23627), where a
process-group kill misses them: nvidia-smi's process list is what finds them. A
foreign process in the way stops the run with a message that names it, unless the
user set ``force``. After the kills, the GPUs' used memory must come back under a
threshold, since the driver frees it only a moment after the process dies and the
next server would otherwise OOM while loading.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import psutil

from specsweep.errors import GpuMemoryNotReleased, GpuQueryError, StaleProcessError
from specsweep.targets import gpus as gpu_query
from specsweep.targets import process
from specsweep.targets.launch_record import LaunchState

log = logging.getLogger(__name__)

SGLANG_MARKERS = (
    "sglang.launch_server",
    "sglang serve",
    "sglang::",
    "specsweep.sim.launch_server",
)
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError)


class HasLaunchState(Protocol):
    """What cleanup needs of a runner: its launch record (LocalRunner has one)."""

    state: LaunchState


@dataclass
class CleanupReport:
    """What kill_stale did and why: for the run log and the person reading it."""

    killed: list[process.KillReport] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)  # left alone, with the reason
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gpus: list[int] | None = None  # target GPUs; None = all
    gpu_checked: bool = False  # nvidia-smi answered
    pids_hidden: bool = False  # container mode: memory used, no PIDs listed
    memory_before: dict[int, int] = field(default_factory=dict)  # MiB per GPU
    memory_after: dict[int, int] = field(default_factory=dict)
    memory_limit: dict[int, int] = field(default_factory=dict)
    release_s: float | None = None  # kills done -> memory under the limit
    timeline: list[tuple[float, dict[int, int]]] = field(default_factory=list)

    @property
    def killed_pids(self) -> list[int]:
        return [pid for r in self.killed for pid in r.terminated]

    def summary(self) -> str:
        lines = [f"killed: {self.killed_pids or 'nothing'}"]
        lines += [f"left alone: {s}" for s in self.spared]
        lines += [f"warning: {w}" for w in self.warnings] + [f"note: {n}" for n in self.notes]
        if self.gpu_checked:
            lines.append(
                f"GPU memory MiB before {self.memory_before} after {self.memory_after} "
                f"(limit {self.memory_limit}); released in "
                + ("-" if self.release_s is None else f"{self.release_s:.2f}s")
            )
        return "\n".join(lines)


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()) or proc.name()
    except _GONE:
        return ""


def looks_like_sglang(proc: psutil.Process) -> bool:
    text = _cmdline(proc)
    return any(marker in text for marker in SGLANG_MARKERS)


def same_user(proc: psutil.Process) -> bool:
    try:
        return proc.uids().real == os.getuid()
    except _GONE:
        return False


def is_ours(proc: psutil.Process) -> bool:
    return same_user(proc) and looks_like_sglang(proc)


def port_arg(cmdline: list[str]) -> int | None:
    for i, arg in enumerate(cmdline):
        if arg == "--port" and i + 1 < len(cmdline):
            value = cmdline[i + 1]
        elif arg.startswith("--port="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None


def describe(proc: psutil.Process, gpu_mib: dict[int, int] | None = None) -> str:
    try:
        user = proc.username()
    except (*_GONE, KeyError):
        user = "?"
    held = ", ".join(f"{mib} MiB on GPU {g}" for g, mib in sorted((gpu_mib or {}).items()))
    text = " ".join(_cmdline(proc).split())[:200]  # setproctitle pads, scripts hold newlines
    return f"pid {proc.pid} (user {user}{'; ' + held if held else ''}): {text}"


def port_listeners(port: int, attempts: int = 5) -> list[psutil.Process]:
    """The processes listening on the port.

    A socket seen before its owner can be named (a process that is starting or exiting
    right then: psutil maps sockets to processes through /proc, not atomically) is
    looked at again; one that stays unnamed belongs to a process this user cannot see.
    """
    for attempt in range(attempts):
        procs, unnamed = [], False
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
                continue
            if conn.pid is None:
                unnamed = True
                continue
            try:
                procs.append(psutil.Process(conn.pid))
            except psutil.NoSuchProcess:
                continue
        if not unnamed:
            return procs
        time.sleep(0.05 * 2**attempt)
    raise StaleProcessError(
        f"port {port} is in use by a process this user cannot see; "
        "free it or choose another server.port"
    )


def _recorded_groups(runner: HasLaunchState) -> set[int]:
    groups = set()
    for entry in runner.state.entries():
        pgid = int(entry["pgid"])
        members = [p for p in process.group_members(pgid) if same_user(p)]
        leader_same = process.is_running(int(entry["pid"]), float(entry.get("create_time") or 0))
        if members and (leader_same or any(looks_like_sglang(p) for p in members)):
            groups.add(pgid)
        else:
            runner.state.remove(pgid)  # gone, or the pgid now belongs to someone else
    return groups


def _visible_devices(proc: psutil.Process) -> set[int] | None:
    """The GPUs a process was started with (CUDA_VISIBLE_DEVICES), None if unknown."""
    try:
        spec = proc.environ().get("CUDA_VISIBLE_DEVICES")
    except _GONE:
        return None
    found = gpu_query.gpus_from_env({"CUDA_VISIBLE_DEVICES": spec} if spec else {})
    return None if found is None else set(found)


class _Plan:
    """Who is to die, who blocks, who is spared; nothing is signalled while planning."""

    def __init__(self, report: CleanupReport, force: bool, tolerate_foreign_gpu: bool) -> None:
        self.report = report
        self.force = force
        self.tolerate_foreign_gpu = tolerate_foreign_gpu
        self.groups: set[int] = set()
        self.singles: dict[int, psutil.Process] = {}
        self.blockers: list[str] = []
        me = psutil.Process()
        self.protected = {me.pid} | {p.pid for p in me.parents()}

    def claimed(self, proc: psutil.Process) -> bool:
        if proc.pid in self.singles:
            return True
        try:
            return os.getpgid(proc.pid) in self.groups
        except ProcessLookupError:
            return True  # gone: nothing left to do

    def claim(self, proc: psutil.Process, why: str) -> None:
        if proc.pid in self.protected or self.claimed(proc):
            return
        log.info("stale candidate: %s (%s)", describe(proc), why)
        self.singles[proc.pid] = proc

    def foreign(self, proc: psutil.Process, why: str, gpu_mib: dict[int, int] | None) -> None:
        if self.force:
            self.report.notes.append(f"force: killing {describe(proc, gpu_mib)} ({why})")
            self.claim(proc, why)
        else:
            self.blockers.append(f"{describe(proc, gpu_mib)} [{why}]")


def _kill(plan: _Plan, runner: HasLaunchState, grace_s: float) -> None:
    """Whole groups where every member is ours (orphans in their own session included),
    single processes where the group holds someone else's too."""
    own_group = os.getpgid(0)
    groups, singles = set(plan.groups), []
    for pid, proc in plan.singles.items():
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if pgid in groups:
            continue
        members = process.group_members(pgid) if pgid not in (own_group, 0, 1) else []
        if members and all(is_ours(m) for m in members):
            groups.add(pgid)
        else:
            singles.append(proc)
    for pgid in sorted(groups - {own_group}):
        result = process.kill_group(pgid, grace_s)
        if result.terminated:
            log.info("killed stale group %d: pids %s", pgid, result.terminated)
            plan.report.killed.append(result)
        runner.state.remove(pgid)
    if singles:
        result = process.kill_processes(singles, grace_s)
        if result.terminated:
            log.info("killed stale processes %s", result.terminated)
            plan.report.killed.append(result)


def _scan_gpus(plan: _Plan, inv: gpu_query.GpuInventory, gpus: list[int] | None) -> dict[int, int]:
    """Claim our compute processes on the target GPUs, name foreign ones; return the
    memory per target GPU held by processes that will stay (the release baseline)."""
    baseline = dict.fromkeys(inv.used_mib(gpus), 0)
    for app in inv.processes:
        mib = {app.gpu: app.used_mib or 0}
        try:
            proc = psutil.Process(app.pid)
        except psutil.NoSuchProcess:
            if gpus is None or app.gpu in gpus:
                plan.report.warnings.append(
                    f"nvidia-smi lists pid {app.pid} ({app.name}, {app.used_mib} MiB on GPU "
                    f"{app.gpu}) but it is not visible here (another PID namespace?): left alone"
                )
                baseline[app.gpu] = baseline.get(app.gpu, 0) + (app.used_mib or 0)
            continue
        if gpus is not None and app.gpu not in gpus:
            if is_ours(proc):
                plan.report.spared.append(f"{describe(proc, mib)}: not on target GPUs {gpus}")
            continue
        if proc.pid in plan.protected:
            plan.report.spared.append(f"{describe(proc, mib)}: this process or its parent")
            baseline[app.gpu] = baseline.get(app.gpu, 0) + (app.used_mib or 0)
        elif is_ours(proc) or plan.claimed(proc):
            plan.claim(proc, f"sglang process of this user holding GPU {app.gpu}")
        elif plan.tolerate_foreign_gpu and not plan.force:
            plan.report.spared.append(f"{describe(proc, mib)}: not ours, tolerated on the GPU")
            baseline[app.gpu] = baseline.get(app.gpu, 0) + (app.used_mib or 0)
        else:
            plan.foreign(proc, f"holds memory on target GPU {app.gpu}", mib)
    return baseline


def _scan_patterns(plan: _Plan, port: int, gpus: list[int] | None, hidden: bool) -> None:
    """sglang processes of this user: those serving this port, and (when nvidia-smi
    cannot name GPU holders) orphaned schedulers that may hold the target GPUs."""
    for proc in psutil.process_iter():
        if proc.pid in plan.protected or not is_ours(proc) or plan.claimed(proc):
            continue
        try:
            cmdline = proc.cmdline()
            parent = proc.parent()
        except _GONE:
            continue
        if port_arg(cmdline) == port:
            plan.claim(proc, f"sglang server of this user for port {port}")
            continue
        if not hidden or not " ".join(cmdline).startswith("sglang::"):
            continue
        if parent is not None and is_ours(parent):
            plan.report.spared.append(f"{describe(proc)}: child of live server {parent.pid}")
            continue
        devices = _visible_devices(proc)
        if gpus is not None and devices is not None and not devices & set(gpus):
            plan.report.spared.append(f"{describe(proc)}: orphan on GPUs {sorted(devices)}")
            continue
        plan.report.warnings.append(
            f"killing orphaned {describe(proc)} found by name only (nvidia-smi shows no PIDs)"
        )
        plan.claim(proc, "orphaned sglang scheduler of this user")


@dataclass
class MemoryWait:
    """How the target GPUs' memory came back under its limit (or did not)."""

    after: dict[int, int]
    release_s: float | None  # None: not under the limit when the wait gave up
    timeline: list[tuple[float, dict[int, int]]]
    over: dict[int, int]  # GPU -> MiB still above its limit


def wait_memory(
    exe: str, limit: dict[int, int], timeout_s: float, poll_s: float = 0.1
) -> MemoryWait:
    """Poll memory.used until every GPU of ``limit`` is at or under its limit."""
    start = time.monotonic()
    timeline: list[tuple[float, dict[int, int]]] = []
    while True:
        used = gpu_query.memory_used(exe, list(limit))
        elapsed = time.monotonic() - start
        timeline.append((round(elapsed, 3), used))
        over = {g: m for g, m in used.items() if m > limit[g]}
        if not over:
            return MemoryWait(used, elapsed, timeline, {})
        if elapsed >= timeout_s:
            return MemoryWait(used, None, timeline, over)
        time.sleep(poll_s)


def memory_holders(exe: str, gpus: list[int]) -> list[str]:
    """Who nvidia-smi says holds memory on these GPUs, described for a person."""
    inv = gpu_query.query(exe)
    holders = []
    for app in inv.on(gpus) if inv else []:
        try:
            holders.append(describe(psutil.Process(app.pid), {app.gpu: app.used_mib or 0}))
        except psutil.NoSuchProcess:
            holders.append(f"pid {app.pid} ({app.name}, {app.used_mib} MiB on GPU {app.gpu})")
    return holders


def _wait_memory(exe: str, report: CleanupReport, timeout_s: float) -> None:
    """Wait until every target GPU is under its limit; raise naming the holders if not."""
    wait = wait_memory(exe, report.memory_limit, timeout_s)
    report.timeline, report.memory_after = wait.timeline, wait.after
    if wait.release_s is not None:
        report.release_s = wait.release_s
        return
    holders = memory_holders(exe, list(wait.over))
    detail = "; ".join(
        f"GPU {g}: {m} MiB used, limit {report.memory_limit[g]}" for g, m in wait.over.items()
    )
    who = (
        "held by: " + "; ".join(holders)
        if holders
        else "nvidia-smi lists no processes (inside a container it cannot see the host's PIDs):"
        " the holder may be outside this container; raise max_used_mib if that memory is expected"
    )
    raise GpuMemoryNotReleased(
        f"GPU memory not released after {timeout_s:.0f}s: {detail}; {who}", report
    )


def kill_stale(
    runner: HasLaunchState,
    port: int,
    *,
    force: bool = False,
    grace_s: float = 15.0,
    gpus: Sequence[int] | None = None,
    nvidia_smi: str | os.PathLike[str] | None = None,
    tolerate_foreign_gpu: bool = False,
    max_used_mib: int | None = None,
    slack_mib: int = 1024,
    memory_timeout_s: float = 60.0,
) -> CleanupReport:
    """Stop leftover servers of ours on this port and these GPUs; refuse to touch
    anyone else's. Then wait until the target GPUs' memory is back under the limit.

    ``gpus``: the target's GPU indices (None: all). ``force``: kill foreign processes
    in the way too. ``tolerate_foreign_gpu``: leave foreign GPU processes alone (shared
    GPUs) and count their memory in the baseline instead of refusing. The memory limit
    per GPU is ``max_used_mib`` if set, else what the processes left alone hold plus
    ``slack_mib`` (driver overhead). Raises StaleProcessError naming any blocker
    before anything is signalled, GpuMemoryNotReleased when memory stays in use.
    """
    targets = None if gpus is None else sorted(set(gpus))
    report = CleanupReport(gpus=targets)
    plan = _Plan(report, force, tolerate_foreign_gpu)
    plan.groups = _recorded_groups(runner)
    port_blockers: list[str] = []  # named together with the GPU blockers: one message
    for proc in port_listeners(port):
        if is_ours(proc):
            plan.claim(proc, f"sglang of this user listening on port {port}")
        elif plan.force:
            report.notes.append(f"force: killing foreign listener {describe(proc)}")
            plan.claim(proc, f"listens on port {port}")
        else:
            port_blockers.append(describe(proc))

    exe = gpu_query.find_nvidia_smi(nvidia_smi)
    inv = None
    sim = gpu_query.simulated()
    if exe is None and sim is not None:  # the scratch inventory: nothing to warn about
        log.info("%s", sim.why)
    elif exe is None:
        log.info("no nvidia-smi on this host: GPU checks skipped")
        report.notes.append("nvidia-smi not found: GPU checks skipped")
    else:
        try:
            inv = gpu_query.query(exe)
        except GpuQueryError as exc:
            log.warning("nvidia-smi failed, GPU checks skipped: %s", exc)
            report.warnings.append(f"nvidia-smi failed, GPU checks skipped: {exc}")
    baseline: dict[int, int] = {}
    if inv is not None:
        report.gpu_checked = True
        report.memory_before = inv.used_mib(targets)
        missing = sorted(set(targets or ()) - set(report.memory_before))
        if missing and (inv.gpus or sim is None):  # not a simulated machine still unborn
            report.warnings.append(f"target GPUs {missing} not found by nvidia-smi")
        report.pids_hidden = inv.pids_hidden(targets, slack_mib)
        if report.pids_hidden:
            msg = (
                "nvidia-smi shows GPU memory in use but no processes (container?): "
                "falling back to process names, the port and recorded groups"
            )
            log.warning(msg)
            report.warnings.append(msg)
        baseline = _scan_gpus(plan, inv, targets)
    _scan_patterns(plan, port, targets, report.pids_hidden)
    problems = []
    if port_blockers:
        problems.append(
            f"port {port} is held by a process specsweep did not start and cannot prove "
            f"is an sglang server of this user: {'; '.join(port_blockers)}. Stop it, pick "
            "another server.port, or run with force=True"
        )
    if plan.blockers:
        problems.append(
            "processes specsweep did not start and cannot prove are sglang servers of this "
            f"user are in the way (port {port}, GPUs {targets or 'all'}): "
            + "; ".join(plan.blockers)
            + ". Stop them, choose other GPUs, or run with force=True"
        )
    if problems:
        raise StaleProcessError(" Also: ".join(problems))
    _kill(plan, runner, grace_s)

    if inv is None or exe is None:
        return report
    if report.pids_hidden and max_used_mib is None and not report.killed:
        report.memory_after = dict(report.memory_before)
        return report  # nothing of ours known to hold it; the launch will tell
    report.memory_limit = {
        g: max_used_mib if max_used_mib is not None else baseline.get(g, 0) + slack_mib
        for g in report.memory_before
    }
    _wait_memory(exe, report, memory_timeout_s)
    if report.release_s is not None and report.killed:
        log.info(
            "GPU memory released %.2fs after the kills: %s", report.release_s, report.memory_after
        )
    return report
