"""fabric/paramiko failures and the remote agent's errors as engine errors.

A user reading one of these messages should know what to check next without
reading a paramiko traceback.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from specsweep.config import SshTarget
from specsweep.errors import (
    ConfigError,
    RemoteError,
    ServerDiedError,
    ServerStartTimeout,
    SshAuthError,
    SshConnectError,
    SshError,
    StaleProcessError,
)


def map_connect_error(exc: BaseException, target: SshTarget) -> SshError:
    """fabric/paramiko/socket errors as messages that say what to check."""
    where = target.address
    known = target.known_hosts or Path("~/.ssh/known_hosts")
    if isinstance(exc, SshError):
        return exc
    if isinstance(exc, paramiko.PasswordRequiredException):
        return SshAuthError(f"the SSH key for {where} is encrypted: set target.passphrase_secret")
    if isinstance(exc, paramiko.BadHostKeyException):
        return SshAuthError(
            f"the host key of {where} does not match {known}: the host was reinstalled, or "
            "someone is in the middle. Check with the host's owner, then replace the entry "
            f"(ssh-keygen -R '[{target.host}]:{target.port}')"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        key = target.key_file or (
            f"secret {target.key_secret}" if target.key_secret else "ssh-agent / ~/.ssh keys"
        )
        return SshAuthError(
            f"authentication failed for {where} with {key}: check target.user and that the "
            "key's public half is in ~/.ssh/authorized_keys there"
        )
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
        return SshAuthError(
            f"the host key of {where} is not in {known}: after checking its fingerprint, add "
            f"it with `ssh-keyscan -p {target.port} {target.host} >> {known}`, or set "
            "target.verify_host_key: false to trust whatever answers there"
        )
    if isinstance(exc, socket.gaierror):
        return SshError(f"unknown host {target.host!r}: {exc.strerror or exc}")
    if isinstance(exc, NoValidConnectionsError | ConnectionRefusedError):
        return SshConnectError(
            f"connection to {where} refused: is sshd running there and is port {target.port} right?"
        )
    if isinstance(exc, TimeoutError | socket.timeout):
        return SshConnectError(
            f"no answer from {where} within {target.connect_timeout_s:.0f}s "
            "(host down, firewalled, or a wrong address)"
        )
    if isinstance(exc, paramiko.SSHException | EOFError | OSError):
        return SshConnectError(f"cannot talk SSH to {where}: {type(exc).__name__}: {exc}")
    return SshError(f"cannot connect to {where}: {type(exc).__name__}: {exc}")


_REMOTE_ERRORS: dict[str, type[Exception]] = {
    "ServerDiedError": ServerDiedError,
    "ServerStartTimeout": ServerStartTimeout,
    "StaleProcessError": StaleProcessError,
    "GpuMemoryNotReleased": StaleProcessError,
    "ConfigError": ConfigError,
}


def rebuild_error(event: Mapping[str, Any], where: str) -> Exception:
    """The agent's error event as the engine error it was on the host."""
    cls = _REMOTE_ERRORS.get(str(event.get("kind")))
    message = str(event.get("message", ""))
    if cls in (ServerDiedError, ServerStartTimeout):
        return cls(f"{message.rstrip()} (on {where})", event.get("log_tail") or ())
    if cls is not None:
        return cls(f"{message} (on {where})")
    return RemoteError(f"on {where}: {event.get('kind')}: {message}")
