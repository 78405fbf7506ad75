"""Process-group primitives: the only code that sends signals.

A server is started in its own session so that its whole tree (launcher,
schedulers, detokenizer, and orphans reparented to init) shares one process
group that can be stopped with one signal, even after the launcher is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field

import psutil

log = logging.getLogger(__name__)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def reap(pid: int) -> None:
    """Collect the exit status of a child of ours so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_running(pid: int, create_time: float | None = None) -> bool:
    """True while pid is a live process (zombies are dead) and, if given, the same one."""
    reap(pid)
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 0.01:
            return False  # the pid was reused by an unrelated process
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes in a process group."""
    members = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            reap(proc.pid)
            continue
        if _pgid(proc.pid) == pgid:
            members.append(proc)
    return members


@dataclass
class KillReport:
    pgid: int
    terminated: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def escalated(self) -> bool:
        return bool(self.killed)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _wait_gone(pgid: int, deadline: float) -> list[psutil.Process]:
    delay = 0.02
    while True:
        alive = group_members(pgid)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


def kill_group(pgid: int, grace_s: float = 15.0) -> KillReport:
    """SIGTERM the group, wait up to grace_s, then SIGKILL whatever is left."""
    if pgid <= 1 or pgid == os.getpgid(0):
        raise ValueError(f"refusing to signal process group {pgid}: it is not a server's")
    start = time.monotonic()
    report = KillReport(pgid)
    members = group_members(pgid)
    report.terminated = [p.pid for p in members]
    if not members:
        return report
    _signal_group(pgid, signal.SIGTERM)
    alive = _wait_gone(pgid, start + grace_s)
    if alive:
        report.killed = [p.pid for p in alive]
        log.warning("process group %d ignored SIGTERM for %.1fs; sending SIGKILL", pgid, grace_s)
        _signal_group(pgid, signal.SIGKILL)
        alive = _wait_gone(pgid, time.monotonic() + 10.0)
        if alive:
            raise RuntimeError(
                f"process group {pgid} survived SIGKILL: {[p.pid for p in alive]} "
                "(uninterruptible sleep? check the GPU driver)"
            )
    report.elapsed_s = time.monotonic() - start
    return report


def kill_processes(procs: list[psutil.Process], grace_s: float = 15.0) -> KillReport:
    """SIGTERM single processes, wait up to grace_s, then SIGKILL the rest.

    For a process that left its server's group (an orphaned scheduler in its own
    session) when its group holds other people's processes too: signalling the group
    would hit them. psutil checks each pid's start time, so a reused pid is never hit.
    """
    start = time.monotonic()
    pgid = _pgid(procs[0].pid) if procs else None
    report = KillReport(pgid if pgid is not None else -1)
    live = [p for p in procs if is_running(p.pid, p.create_time())]
    report.terminated = [p.pid for p in live]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if not live:
            break
        if sig == signal.SIGKILL:
            report.killed = [p.pid for p in live]
            log.warning(
                "pids %s ignored SIGTERM for %.1fs; sending SIGKILL", report.killed, grace_s
            )
        for proc in live:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(sig)
        deadline = time.monotonic() + wait_s
        delay = 0.02
        while True:
            live = [p for p in live if is_running(p.pid, p.create_time())]
            if not live or time.monotonic() >= deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
    if live:
        raise RuntimeError(f"pids {[p.pid for p in live]} survived SIGKILL (uninterruptible?)")
    report.elapsed_s = time.monotonic() - start
    return report
