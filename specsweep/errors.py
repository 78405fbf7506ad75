"""One exception hierarchy for the engine and its flows; messages say what to do next.

Errors from libraries (paramiko/fabric, aiohttp, pyarrow, Prefect) are translated
into these at the boundary that calls them, so a caller catches one family::

    SpecsweepError
    ├── ConfigError (ValueError)      bad input: nothing was launched; exit code 2
    │   └── UnsupportedByVersion      the target's sglang lacks a flag the config needs
    ├── VariantMisconfigured          the server ran something else than the variant says
    ├── PolicyExportRefused           a run's measurements cannot become a tier config
    ├── ServerStartError              the server did not become ready (carries its log tail)
    │   ├── ServerDiedError           it exited while we waited (`transient`: relaunch helps)
    │   └── ServerStartTimeout        it stayed alive but never became ready
    ├── StaleProcessError             something we may not kill is in the way
    │   └── GpuMemoryNotReleased      the kills worked, the GPU memory did not come back
    ├── GpuQueryError (RuntimeError)  nvidia-smi exists but did not answer
    ├── SshError                      talking to an SSH target failed
    │   ├── SshConnectError           unreachable (may pass)
    │   ├── SshAuthError              credentials or host key refused (will not pass)
    │   ├── SshConnectionLost         dropped mid-command (the command may still run)
    │   └── SshCommandTimeout         a remote command outlived its limit
    ├── RemoteError                   the agent on a target failed otherwise
    ├── HostUnavailable               a fleet host failed its pre-flight: run elsewhere
    ├── TargetLockMissing             the target's Prefect concurrency limit is missing
    ├── SweepFailed                   variants failed (their measured levels are kept)
    ├── RegressionDetected            a nightly number got worse than its history allows
    └── LoadError                     one request of the load generator failed
        ├── ConnectionFailed          the connection broke before the response ended
        ├── ServerError               the server reported an error inside the stream
        └── WireError (ValueError)    a load-generator result line that does not parse

The simulator (`specsweep.sim`) imports nothing of the engine and keeps its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class SpecsweepError(Exception):
    """Base of every engine error."""


class ConfigError(SpecsweepError, ValueError):
    """A configuration that cannot run; the message says what to change."""


class DatasetError(ConfigError):
    """A prompt file (load.dataset) that cannot be used; the message names the file and its
    first bad record. Raised before anything is launched."""


class UnsupportedByVersion(ConfigError):
    """The target's sglang is too old (or too new) for a flag the sweep needs; the
    message names the version found and the one that has it."""


class VariantMisconfigured(SpecsweepError):
    """The server runs something else than the variant claims (sglang logged that it
    fell back to static speculation): measuring it would put a number under a false
    name, so the variant fails instead. A relaunch does not help."""


class PolicyExportRefused(SpecsweepError):
    """A run's measurements cannot be turned into an engine config; the message says why
    (tree variants, no baseline, levels too noisy) and what to measure instead."""


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


class GpuMemoryNotReleased(StaleProcessError):
    """The kills went through but the target GPUs' memory did not come back in time."""

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report  # the cleanup's CleanupReport


class GpuQueryError(SpecsweepError, RuntimeError):
    """nvidia-smi exists but did not answer (driver problem, timeout, odd output)."""


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


class HostUnavailable(SpecsweepError):
    """A fleet host is down or failed its pre-flight check; its variant runs elsewhere."""


class TargetLockMissing(SpecsweepError):
    """The target's concurrency limit was not created; the message says how."""


class SweepFailed(SpecsweepError):
    """Some variants failed; their levels are missing from the results."""

    def __init__(self, run_id: str, failed: list[str]) -> None:
        super().__init__(run_id, failed)  # args stay (run_id, failed): picklable, copyable
        self.run_id = run_id
        self.failed = failed

    def __str__(self) -> str:
        return (
            f"run {self.run_id}: variants failed: {', '.join(self.failed)} "
            "(their measured levels are kept)"
        )


class RegressionDetected(SpecsweepError):
    """A judged number got worse than its history allows; the message names each one."""

    def __init__(self, run_id: str, message: str) -> None:
        super().__init__(run_id, message)  # picklable: args are the constructor's
        self.run_id = run_id
        self.message = message

    def __str__(self) -> str:
        return self.message


class LoadError(SpecsweepError):
    """One request of the load generator failed; recorded in its row, never raised out."""


class ConnectionFailed(LoadError):
    """The connection could not be made or broke before the response ended."""


class ServerError(LoadError):
    """The server reported an error inside the stream."""


class WireError(LoadError, ValueError):
    """A line that is not a well-formed result of this load generator."""


__all__ = [
    "ConfigError",
    "ConnectionFailed",
    "GpuMemoryNotReleased",
    "GpuQueryError",
    "HostUnavailable",
    "LoadError",
    "PolicyExportRefused",
    "RegressionDetected",
    "RemoteError",
    "ServerDiedError",
    "ServerError",
    "ServerStartError",
    "ServerStartTimeout",
    "SpecsweepError",
    "SshAuthError",
    "SshCommandTimeout",
    "SshConnectError",
    "SshConnectionLost",
    "SshError",
    "StaleProcessError",
    "SweepFailed",
    "TargetLockMissing",
    "UnsupportedByVersion",
    "VariantMisconfigured",
    "WireError",
]
