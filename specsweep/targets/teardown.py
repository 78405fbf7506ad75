"""Teardown: the server's process group, then what it left behind, then its GPU memory.

A process-group kill misses an sglang scheduler that moved into a session of
its own (sglang issue 23627): it keeps ~90 GB of GPU memory after the launcher
is gone, and before this step only the *next* variant's kill-stale found it.
So a teardown ends the way kill-stale does, but kills only what is provably
this server's: every descendant of its launcher, listed (pid and start time)
while the launcher still runs, before the group is signalled; and, when the
launcher died first and its orphans were reparented, sglang processes of this
user started after the launch, orphaned (no live sglang parent), that serve
the server's port or hold memory on its GPUs. Then it waits until the GPUs'
memory is back under the limit the launch started from, and says how much was
released or what still holds it. (An environment tag would not do: sglang
renames its processes with setproctitle, which wipes /proc/<pid>/environ.)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil

from specsweep.targets import gpus as gpu_query
from specsweep.targets import process
from specsweep.targets.cleanup import (
    describe,
    looks_like_sglang,
    memory_holders,
    port_arg,
    port_listeners,
    same_user,
    wait_memory,
)
from specsweep.targets.handle import ServerHandle

log = logging.getLogger(__name__)

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError)


@dataclass
class TeardownReport:
    """What a teardown stopped and what the GPUs held before and after it."""

    pgid: int
    terminated: list[int] = field(default_factory=list)  # the group's members, TERMed
    killed: list[int] = field(default_factory=list)  # of those, the ones that needed KILL
    leftovers: list[str] = field(default_factory=list)  # left the group, killed after it
    leftover_pids: list[int] = field(default_factory=list)
    gpus: list[int] | None = None  # the target GPUs; None = all
    gpu_checked: bool = False  # nvidia-smi answered
    memory_before: dict[int, int] = field(default_factory=dict)  # MiB per GPU, server up
    memory_after: dict[int, int] = field(default_factory=dict)
    memory_limit: dict[int, int] = field(default_factory=dict)
    release_s: float | None = None  # kills done -> memory under the limit
    holders: list[str] = field(default_factory=list)  # still holding memory when it gave up
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def escalated(self) -> bool:
        return bool(self.killed)

    @property
    def released_mib(self) -> int:
        return sum(max(0, b - self.memory_after.get(g, b)) for g, b in self.memory_before.items())

    @property
    def memory_back(self) -> bool:
        """True when the GPUs are back under their limit (or were not checked)."""
        return not self.gpu_checked or self.release_s is not None

    def summary(self) -> str:
        """One line for the run log: what stopped, and where the GPU memory stands."""
        line = f"server group {self.pgid} stopped in {self.elapsed_s:.2f}s"
        if self.killed:
            line += f" (SIGKILL for {self.killed})"
        if self.leftovers:
            line += "; it left behind " + "; ".join(self.leftovers) + ": killed"
        if not self.gpu_checked:
            return line + "; GPU memory not checked (" + (self.notes or ["no nvidia-smi"])[0] + ")"
        per_gpu = ", ".join(
            f"GPU {g} {self.memory_before.get(g, 0):,} -> {m:,} MiB"
            for g, m in sorted(self.memory_after.items())
        )
        if self.release_s is not None:
            released = f"{self.released_mib:,} MiB in {self.release_s:.2f}s"
            return f"{line}; GPU memory released {released} ({per_gpu})"
        held = "; ".join(self.holders) or "nvidia-smi names no process"
        return f"{line}; GPU memory NOT back under its limit ({per_gpu}); still held by: {held}"


def _started_after(proc: psutil.Process, handle: ServerHandle) -> bool:
    try:
        return proc.create_time() >= handle.create_time - 0.01
    except _GONE:
        return False


def descendants(handle: ServerHandle) -> list[psutil.Process]:
    """The launcher's whole tree while it runs, sessions of their own included."""
    if not process.is_running(handle.pid, handle.create_time):
        return []
    try:
        return psutil.Process(handle.pid).children(recursive=True)
    except _GONE:
        return []


def _live(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except _GONE:
        return False


def _orphaned(proc: psutil.Process) -> bool:
    """No live sglang parent: a live server's child belongs to that server."""
    try:
        parent = proc.parent()
    except _GONE:
        return False
    return parent is None or not looks_like_sglang(parent)


def left_behind(
    handle: ServerHandle,
    tree: list[psutil.Process],
    gpus: list[int] | None,
    inv: gpu_query.GpuInventory | None,
    pids_hidden: bool = False,
) -> list[psutil.Process]:
    """Live processes of this server outside its (now stopped) group.

    ``tree``: the launcher's descendants listed before the group was signalled.
    ``pids_hidden``: nvidia-smi shows memory but no processes (a container), so an
    orphaned ``sglang::`` process started after the launch counts as on the GPUs.
    """
    me = psutil.Process()
    protected = {me.pid} | {p.pid for p in me.parents()}
    # psutil checks the start time too: a reused pid is not the process listed
    found = {p.pid: p for p in tree if p.pid not in protected and _live(p)}
    on_gpus = {app.pid for app in inv.on(gpus)} if inv is not None else set()
    on_port = {p.pid for p in port_listeners(handle.port)} if handle.port else set()
    for proc in psutil.process_iter():
        if proc.pid in protected or proc.pid in found or not same_user(proc):
            continue
        if not looks_like_sglang(proc) or not _started_after(proc, handle):
            continue
        try:
            cmdline = proc.cmdline()
        except _GONE:
            continue
        serves_port = proc.pid in on_port or port_arg(cmdline) == handle.port
        renamed = " ".join(cmdline).startswith("sglang::")
        on_target = proc.pid in on_gpus or (pids_hidden and renamed)
        if (serves_port or on_target) and _orphaned(proc) and _live(proc):
            found[proc.pid] = proc
    return list(found.values())


def _query(exe: str | None, report: TeardownReport) -> gpu_query.GpuInventory | None:
    if exe is None:
        report.notes.append("no nvidia-smi on this host")
        return None
    try:
        return gpu_query.query(exe)
    except gpu_query.GpuQueryError as exc:
        report.notes.append(f"nvidia-smi failed: {exc}")
        return None


def _default_limit(
    inv: gpu_query.GpuInventory, gpus: list[int] | None, ours: set[int], slack_mib: int
) -> dict[int, int]:
    """What the processes that stay hold, per target GPU, plus the driver's slack."""
    limit = dict.fromkeys(inv.used_mib(gpus), slack_mib)
    for app in inv.on(gpus):
        if app.pid not in ours and process.is_running(app.pid):
            limit[app.gpu] = limit.get(app.gpu, slack_mib) + (app.used_mib or 0)
    return limit


def stop_server(
    handle: ServerHandle,
    gpus: Sequence[int] | None = None,
    *,
    memory_limit: dict[int, int] | None = None,
    grace_s: float = 15.0,
    nvidia_smi: str | os.PathLike[str] | None = None,
    slack_mib: int = 1024,
    memory_timeout_s: float = 60.0,
) -> TeardownReport:
    """Stop a launched server completely and wait for its GPU memory.

    ``gpus``: the target's GPU indices (None: all). ``memory_limit``: per GPU, the
    memory that may stay in use (the kill-stale step's limit before the launch);
    default: what other processes hold plus ``slack_mib``. Never raises for memory
    that stays in use: the report names the holder, and the next kill-stale step
    refuses to launch on top of it.
    """
    start = time.monotonic()
    targets = None if gpus is None else sorted(set(gpus))
    report = TeardownReport(handle.pgid, gpus=targets)
    exe = gpu_query.find_nvidia_smi(nvidia_smi)
    inv = _query(exe, report)
    if inv is not None:
        report.gpu_checked = True
        report.memory_before = inv.used_mib(targets)
    tree = descendants(handle)  # before any signal: the proof of what is this server's
    group = process.kill_group(handle.pgid, grace_s)
    report.terminated, report.killed = group.terminated, group.killed
    process.reap(handle.pid)
    hidden = inv is not None and inv.pids_hidden(targets, slack_mib)
    if hidden:
        report.notes.append("nvidia-smi lists no processes (container?): orphans found by name")
    leftovers = left_behind(handle, tree, targets, inv, hidden)
    if leftovers:
        report.leftovers = [describe(p) for p in leftovers]
        log.warning("server %d left processes outside its group: %s", handle.pid, report.leftovers)
        result = process.kill_processes(leftovers, grace_s)
        report.leftover_pids = result.terminated
        report.killed += result.killed
    if inv is not None and exe is not None:
        ours = {handle.pid, *report.terminated, *report.leftover_pids}
        report.memory_limit = dict(memory_limit) if memory_limit else {}
        report.memory_limit = report.memory_limit or _default_limit(inv, targets, ours, slack_mib)
        wait = wait_memory(exe, report.memory_limit, memory_timeout_s)
        report.memory_after, report.release_s = wait.after, wait.release_s
        if wait.release_s is None:
            report.holders = memory_holders(exe, list(wait.over))
            log.warning("GPU memory not back after teardown: %s", report.holders)
    report.elapsed_s = time.monotonic() - start
    return report
