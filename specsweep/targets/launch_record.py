"""The launch record on a target: which process groups specsweep started.

It lets a later run prove that a leftover process is one of ours (and so may
be killed) even when the flow that started it crashed before its teardown.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from specsweep.targets.handle import ServerHandle


class LaunchState:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def entries(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return []
        return [e for e in data if isinstance(e, dict) and "pgid" in e]

    def _write(self, entries: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".launched.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(entries, fh, indent=1)
        os.replace(tmp, self.path)

    def add(self, handle: ServerHandle) -> None:
        entry = {
            "pid": handle.pid,
            "pgid": handle.pgid,
            "create_time": handle.create_time,
            "port": handle.port,
            "uid": os.getuid(),
            "command": handle.command,
            "started_at": handle.started_at.isoformat(),
        }
        self._write([e for e in self.entries() if e["pgid"] != handle.pgid] + [entry])

    def remove(self, pgid: int) -> None:
        self._write([e for e in self.entries() if e["pgid"] != pgid])
