"""Run servers on this machine: detached, logged to a file, stoppable as a group."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from specsweep.sglang_cmd import LaunchCommand
from specsweep.targets import process
from specsweep.targets.state import LaunchState


@dataclass(frozen=True)
class ServerHandle:
    """Everything needed to watch and stop a launched server, even from another process."""

    pid: int
    pgid: int
    create_time: float
    port: int
    log_path: Path
    command: str
    started_at: datetime


def tail_file(path: Path, lines: int = 20, max_bytes: int = 64 * 1024) -> list[str]:
    """The last lines of a (possibly huge, possibly still growing) log file."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


class LocalRunner:
    """Starts and stops servers as child sessions of this process."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.state = LaunchState(self.workdir / "launched.json")

    def start(self, cmd: LaunchCommand, log_path: Path, port: int) -> ServerHandle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **cmd.env, "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as log:
            log.write(f"# specsweep launch: {cmd.shell()}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                list(cmd.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        try:
            create_time = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            create_time = 0.0
        handle = ServerHandle(
            pid=proc.pid,
            pgid=proc.pid,  # start_new_session makes the child its group leader
            create_time=create_time,
            port=port,
            log_path=log_path,
            command=cmd.shell(),
            started_at=datetime.now(UTC),
        )
        self.state.add(handle)
        return handle

    def is_alive(self, handle: ServerHandle) -> bool:
        return process.is_running(handle.pid, handle.create_time)

    def tail(self, handle: ServerHandle, lines: int = 20) -> list[str]:
        return tail_file(handle.log_path, lines)

    def stop(self, handle: ServerHandle, grace_s: float = 15.0) -> process.KillReport:
        """Stop the server's whole process group, orphans included, then forget it."""
        report = process.kill_group(handle.pgid, grace_s)
        process.reap(handle.pid)
        self.state.remove(handle.pgid)
        return report
