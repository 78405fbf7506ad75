"""A launched server, as every target kind describes it: enough to watch and stop it
from another process (the agent on an SSH host, a cancellation hook), and its log."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


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
