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


def read_from(path: Path, offset: int, max_bytes: int = 16 * 1024 * 1024) -> tuple[str, int]:
    """The log written since byte ``offset`` (at most ``max_bytes``) and the new offset.

    A reader that keeps the offset sees every byte once, whatever the log's size; a log
    that shrank (rotated, rewritten) is read again from its start.
    """
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            start = offset if 0 <= offset <= size else 0
            fh.seek(start)
            data = fh.read(max_bytes)
    except FileNotFoundError:
        return "", offset
    return data.decode("utf-8", errors="replace").replace("\r", "\n"), start + len(data)
