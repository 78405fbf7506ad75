"""What the pipeline asks of a target, and the local machine's answer.

A host runs the lifecycle steps where the GPUs are: cleanup, launch, the
readiness wait, the load generator, teardown. ``LocalHost`` does them in this
process; ``SshHost`` (targets/ssh.py) has the GPU host do the same code.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from specsweep.cleanup import CleanupReport, kill_stale
from specsweep.config import LoadSpec, LocalTarget, ServerSpec
from specsweep.errors import ConfigError
from specsweep.gpus import gpus_from_env
from specsweep.health import Readiness, ReadyReport, wait_until_ready
from specsweep.loadgen.runner import LevelResult, run_level_sync
from specsweep.server_facts import ServerFacts, server_facts
from specsweep.sglang_cmd import LaunchCommand
from specsweep.targets.local import LocalRunner, ServerHandle
from specsweep.targets.process import KillReport

ReadyProgress = Callable[[Readiness, str], None]
LevelProgress = Callable[[int, int], None]


class Host(Protocol):
    def kill_stale(
        self, port: int, server_env: Mapping[str, str], *, force: bool, tolerate_foreign_gpu: bool
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
    ) -> LevelResult: ...

    def stop(self, handle: ServerHandle, grace_s: float = 15.0) -> KillReport: ...

    def is_alive(self, handle: ServerHandle) -> bool: ...

    def tail(self, handle: ServerHandle, lines: int = 20) -> list[str]: ...


def check_executable(argv0: str) -> None:
    if shutil.which(argv0) is None:
        raise ConfigError(
            f"cannot launch the server: {argv0!r} is not an executable on this host "
            "(set server.python to the interpreter that has sglang, or fix server.launch_prefix)"
        )


class LocalHost:
    """This machine, as this user."""

    def __init__(self, workdir: Path) -> None:
        self.runner = LocalRunner(workdir)

    @classmethod
    def for_target(cls, target: LocalTarget) -> LocalHost:
        return cls(target.workdir)

    def kill_stale(
        self, port: int, server_env: Mapping[str, str], *, force: bool, tolerate_foreign_gpu: bool
    ) -> CleanupReport:
        """Stop leftovers of ours on the port and GPUs (CUDA_VISIBLE_DEVICES, else all)."""
        return kill_stale(
            self.runner,
            port,
            force=force,
            gpus=gpus_from_env(server_env),
            tolerate_foreign_gpu=tolerate_foreign_gpu,
        )

    def log_path(self, run_id: str, label: str) -> Path:
        return self.runner.workdir / "logs" / run_id / f"{label}.log"

    def start(self, cmd: LaunchCommand, log_path: Path, port: int) -> ServerHandle:
        check_executable(cmd.argv[0])
        return self.runner.start(cmd, log_path, port)

    def wait_ready(
        self, handle: ServerHandle, server: ServerSpec, on_progress: ReadyProgress | None = None
    ) -> ReadyReport:
        return wait_until_ready(
            server.base_url,
            is_alive=lambda: self.runner.is_alive(handle),
            tail_log=lambda n: self.runner.tail(handle, n),
            timeout_s=server.startup_timeout_s,
            on_progress=on_progress,
        )

    def facts(self, server: ServerSpec) -> ServerFacts:
        return server_facts(server)

    def run_level(
        self,
        server: ServerSpec,
        concurrency: int,
        load: LoadSpec,
        on_progress: LevelProgress | None = None,
    ) -> LevelResult:
        return run_level_sync(server.base_url, concurrency, load, on_progress=on_progress)

    def stop(self, handle: ServerHandle, grace_s: float = 15.0) -> KillReport:
        return self.runner.stop(handle, grace_s)

    def is_alive(self, handle: ServerHandle) -> bool:
        return self.runner.is_alive(handle)

    def tail(self, handle: ServerHandle, lines: int = 20) -> list[str]:
        return self.runner.tail(handle, lines)
