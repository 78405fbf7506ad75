"""The parts an SSH session is made of: specsweep's package as shipped to a host,
line streams from remote commands, and private keys given as text."""

from __future__ import annotations

import hashlib
import io
import logging
import tarfile
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import paramiko

import specsweep
from specsweep.errors import SshAuthError
from specsweep.loadgen.wire import parse_line

log = logging.getLogger(__name__)


@cache
def package_tarball() -> tuple[bytes, str]:
    """specsweep's source as a reproducible tar.gz, and its content digest."""
    root = Path(specsweep.__file__).parent
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for path in files:
            rel = Path("specsweep") / path.relative_to(root)
            data = path.read_bytes()
            digest.update(str(rel).encode() + b"\0" + data + b"\0")
            info = tarfile.TarInfo(str(rel))
            info.size = len(data)
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), digest.hexdigest()[:16]


class LineSink(io.TextIOBase):
    """A stream invoke writes chunks to; calls back once per complete line."""

    def __init__(self, on_line: Callable[[str], None] | None, keep: int = 0) -> None:
        self.on_line = on_line
        self.keep = keep
        self.kept: list[str] = []
        self._buf = ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self._buf += s
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            self._line(line)
        return len(s)

    def _line(self, line: str) -> None:
        if self.keep:
            self.kept = [*self.kept[-(self.keep - 1) :], line] if self.keep > 1 else [line]
        if self.on_line is not None and line.strip():
            self.on_line(line)

    def close_out(self) -> None:
        if self._buf:
            self._line(self._buf)
            self._buf = ""


class AgentStream(threading.Thread):
    """Reads an agent's JSON lines from a channel: the newest progress event, the end."""

    def __init__(self, channel: paramiko.Channel) -> None:
        super().__init__(daemon=True)
        self.channel = channel
        self.latest: dict[str, Any] = {}
        self.final: dict[str, Any] = {}
        self.ended = threading.Event()
        self.start()

    def run(self) -> None:
        try:
            for line in self.channel.makefile("r"):
                event = parse_event(line) if line.strip() else {}
                if event.get("event") == "progress":
                    self.latest = event
                elif event:
                    self.final = event
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            self.ended.set()


def parse_event(line: str) -> dict[str, Any]:
    try:
        return parse_line(line)
    except ValueError:
        log.debug("remote: %s", line)
        return {"event": "output", "line": line}


def load_private_key(text: str, passphrase: str | None) -> paramiko.PKey:
    """A private key given as text (from a secret store), in any type paramiko reads."""
    errors = []
    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key(io.StringIO(text), password=passphrase)
        except paramiko.PasswordRequiredException:
            raise
        except (paramiko.SSHException, ValueError) as exc:
            errors.append(f"{cls.__name__}: {exc}")
    raise SshAuthError(f"the key secret is not a private key paramiko reads ({'; '.join(errors)})")
