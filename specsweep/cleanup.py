"""Kill stale servers before a launch, and never anything that is not provably ours.

"Ours" means: a process group specsweep recorded when it launched it, or an
sglang process (launcher or renamed ``sglang::*`` child) of this same user
serving this port. A foreign process in the way stops the run with a message
that names it, unless the user set ``force``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import psutil

from specsweep.errors import StaleProcessError
from specsweep.targets import process
from specsweep.targets.local import LocalRunner

log = logging.getLogger(__name__)

SGLANG_MARKERS = (
    "sglang.launch_server",
    "sglang serve",
    "sglang::",
    "specsweep.sim.launch_server",
)


@dataclass
class CleanupReport:
    killed: list[process.KillReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def killed_pids(self) -> list[int]:
        return [pid for r in self.killed for pid in r.terminated]


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()) or proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def looks_like_sglang(proc: psutil.Process) -> bool:
    text = _cmdline(proc)
    return any(marker in text for marker in SGLANG_MARKERS)


def _same_user(proc: psutil.Process) -> bool:
    try:
        return proc.uids().real == os.getuid()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _port_arg(cmdline: list[str]) -> int | None:
    for i, arg in enumerate(cmdline):
        if arg == "--port" and i + 1 < len(cmdline):
            value = cmdline[i + 1]
        elif arg.startswith("--port="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None


def describe(proc: psutil.Process) -> str:
    try:
        user = proc.username()
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError):
        user = "?"
    return f"pid {proc.pid} (user {user}): {_cmdline(proc)[:200]}"


def port_listeners(port: int) -> list[psutil.Process]:
    procs = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            if conn.pid is None:
                raise StaleProcessError(
                    f"port {port} is in use by a process this user cannot see; "
                    "free it or choose another server.port"
                )
            try:
                procs.append(psutil.Process(conn.pid))
            except psutil.NoSuchProcess:
                continue
    return procs


def _recorded_groups(runner: LocalRunner) -> set[int]:
    groups = set()
    for entry in runner.state.entries():
        pgid = int(entry["pgid"])
        members = [p for p in process.group_members(pgid) if _same_user(p)]
        leader_same = process.is_running(int(entry["pid"]), float(entry.get("create_time") or 0))
        if members and (leader_same or any(looks_like_sglang(p) for p in members)):
            groups.add(pgid)
        else:
            runner.state.remove(pgid)  # gone, or the pgid now belongs to someone else
    return groups


def kill_stale(
    runner: LocalRunner, port: int, *, force: bool = False, grace_s: float = 15.0
) -> CleanupReport:
    """Stop leftover servers of ours on this port; refuse to touch anyone else's."""
    report = CleanupReport()
    groups = _recorded_groups(runner)
    for proc in port_listeners(port):
        if _same_user(proc) and looks_like_sglang(proc):
            groups.add(os.getpgid(proc.pid))
        elif force:
            report.notes.append(f"force: killing foreign listener {describe(proc)}")
            groups.add(os.getpgid(proc.pid))
        else:
            raise StaleProcessError(
                f"port {port} is held by a process specsweep did not start and cannot prove "
                f"is an sglang server of this user: {describe(proc)}. Stop it, pick another "
                "server.port, or run with force=True"
            )
    for proc in psutil.process_iter():
        if proc.pid == os.getpid() or not _same_user(proc) or not looks_like_sglang(proc):
            continue
        try:
            if _port_arg(proc.cmdline()) == port:
                groups.add(os.getpgid(proc.pid))
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    own_group = os.getpgid(0)
    for pgid in sorted(groups - {own_group}):
        result = process.kill_group(pgid, grace_s)
        if result.terminated:
            log.info("killed stale server group %d: pids %s", pgid, result.terminated)
            report.killed.append(result)
        runner.state.remove(pgid)
    return report
