"""One exception hierarchy for the engine; messages say what to do next."""

from __future__ import annotations

from collections.abc import Sequence


class SpecsweepError(Exception):
    """Base of every engine error."""


class ConfigError(SpecsweepError, ValueError):
    """A configuration that cannot run; the message says what to change."""


class ServerStartError(SpecsweepError):
    """The server did not become ready; carries the tail of its log."""

    def __init__(self, message: str, log_tail: Sequence[str] = ()) -> None:
        self.reason = message
        self.log_tail = list(log_tail)
        tail = "\n".join(f"    | {line}" for line in self.log_tail)
        super().__init__(f"{message}\n  last log lines:\n{tail}" if tail else message)


class ServerDiedError(ServerStartError):
    """The server process exited while specsweep waited for it."""

    @property
    def transient(self) -> bool:
        """Died of something a relaunch can fix (port still held, NCCL or bind trouble).

        A CUDA OOM, a bad flag or a missing model will fail the same way again.
        """
        tail = "\n".join(self.log_tail).lower()
        return any(marker in tail for marker in _TRANSIENT_MARKERS)


_TRANSIENT_MARKERS = (
    "address already in use",
    "errno 98",
    "ncclsystemerror",
    "ncclremoteerror",
    "nccl timeout",
    "watchdog caught collective operation timeout",
    "the client socket has failed to connect",
    "connection reset by peer",
)


class ServerStartTimeout(ServerStartError):
    """The server stayed alive but never became ready in time."""


class StaleProcessError(SpecsweepError):
    """Something specsweep may not kill stands in the way of the launch."""


class SshError(SpecsweepError):
    """Talking to an SSH target failed; the message names the host and what to check."""


class SshConnectError(SshError):
    """The host could not be reached (refused, timed out, unknown name): may pass."""


class SshAuthError(SshError):
    """The host refused our credentials or its key did not verify: will not pass by itself."""


class SshConnectionLost(SshError):
    """The connection dropped while a remote command ran; the command may still run there."""


class SshCommandTimeout(SshError):
    """A remote command outlived its timeout and was stopped."""


class RemoteError(SpecsweepError):
    """The specsweep agent on a target failed in a way that has no engine error class."""


__all__ = [
    "ConfigError",
    "RemoteError",
    "ServerDiedError",
    "ServerStartError",
    "ServerStartTimeout",
    "SpecsweepError",
    "SshAuthError",
    "SshCommandTimeout",
    "SshConnectError",
    "SshConnectionLost",
    "SshError",
    "StaleProcessError",
]


class HostUnavailable(SpecsweepError):
    """A fleet host is down or failed its pre-flight check; its variant runs elsewhere."""
