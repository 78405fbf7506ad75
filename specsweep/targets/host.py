"""What the pipeline asks of a target.

A host runs the lifecycle steps where the GPUs are: cleanup, launch, the
readiness wait, the load generator, teardown. ``LocalHost`` (targets/local.py)
does them in this process; ``SshHost`` (targets/ssh/) has the GPU host run the
same code. A new kind of target implements this protocol and adds a branch to
``specsweep.targets.host_for``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from specsweep.config import LoadSpec, ServerSpec
    from specsweep.config.command import LaunchCommand
    from specsweep.config.versions import SglangVersion
    from specsweep.loadgen.runner import LevelResult
    from specsweep.results.drift import Drift
    from specsweep.targets.cleanup import CleanupReport
    from specsweep.targets.handle import ServerHandle
    from specsweep.targets.health import Readiness, ReadyReport
    from specsweep.targets.server_facts import ServerFacts
    from specsweep.targets.teardown import TeardownReport

ReadyProgress = Callable[["Readiness", str], None]
LevelProgress = Callable[[int, int], None]


class Host(Protocol):
    def kill_stale(
        self,
        port: int,
        server_env: Mapping[str, str],
        *,
        force: bool,
        tolerate_foreign_gpu: bool,
        grace_s: float = 15.0,
    ) -> CleanupReport: ...

    def log_path(self, run_id: str, label: str) -> Path: ...

    def start(self, cmd: LaunchCommand, log_path: Path, port: int) -> ServerHandle: ...

    def wait_ready(
        self, handle: ServerHandle, server: ServerSpec, on_progress: ReadyProgress | None
    ) -> ReadyReport: ...

    def facts(self, server: ServerSpec) -> ServerFacts: ...

    def run_level(
        self,
        server: ServerSpec,
        concurrency: int,
        load: LoadSpec,
        on_progress: LevelProgress | None,
        drift: Drift | None = None,
    ) -> LevelResult: ...

    def stop(
        self,
        handle: ServerHandle,
        server_env: Mapping[str, str],
        *,
        memory_limit: dict[int, int] | None = None,
        grace_s: float = 15.0,
    ) -> TeardownReport: ...

    def is_alive(self, handle: ServerHandle) -> bool: ...

    def tail(self, handle: ServerHandle, lines: int = 20) -> list[str]: ...

    def workdir(self) -> str: ...

    def write_file(self, path: str, data: bytes) -> None: ...

    def read_log(self, handle: ServerHandle, offset: int) -> tuple[str, int]: ...

    def sglang_version(self, server: ServerSpec) -> SglangVersion:
        """The target's sglang version and where it was read (package metadata, else
        sglang's own __version__); ConfigError when it cannot tell."""
        ...
