"""This machine as a target: servers started detached, logged to a file, stopped as a group,
and every lifecycle step run in this process."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import psutil

from specsweep.config import LoadSpec, LocalTarget, ServerSpec
from specsweep.config.command import LaunchCommand
from specsweep.config.versions import SglangVersion
from specsweep.errors import ConfigError
from specsweep.loadgen.runner import LevelResult, run_level_sync
from specsweep.results.drift import Drift
from specsweep.targets import process
from specsweep.targets.cleanup import CleanupReport, kill_stale
from specsweep.targets.gpus import gpus_from_env
from specsweep.targets.handle import ServerHandle, read_from, tail_file
from specsweep.targets.health import ReadyReport, wait_until_ready
from specsweep.targets.host import LevelProgress, ReadyProgress
from specsweep.targets.launch_record import LaunchState
from specsweep.targets.server_facts import ServerFacts, server_facts
from specsweep.targets.sglang_version import probe_argv, probe_env, probed_version, run_probe
from specsweep.targets.teardown import TeardownReport, stop_server


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

    def stop(
        self,
        handle: ServerHandle,
        gpus: list[int] | None = None,
        *,
        memory_limit: dict[int, int] | None = None,
        grace_s: float = 15.0,
    ) -> TeardownReport:
        """Stop the server's group, what it left outside it, wait for its GPU memory
        (target ``gpus``; None: all), then forget it."""
        report = stop_server(handle, gpus, memory_limit=memory_limit, grace_s=grace_s)
        self.state.remove(handle.pgid)
        return report


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
        self,
        port: int,
        server_env: Mapping[str, str],
        *,
        force: bool,
        tolerate_foreign_gpu: bool,
        grace_s: float = 15.0,
    ) -> CleanupReport:
        """Stop leftovers of ours on the port and GPUs (CUDA_VISIBLE_DEVICES, else all)."""
        return kill_stale(
            self.runner,
            port,
            force=force,
            grace_s=grace_s,
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
        drift: Drift | None = None,
    ) -> LevelResult:
        return run_level_sync(
            server.base_url, concurrency, load, on_progress=on_progress, drift=drift
        )

    def stop(
        self,
        handle: ServerHandle,
        server_env: Mapping[str, str],
        *,
        memory_limit: dict[int, int] | None = None,
        grace_s: float = 15.0,
    ) -> TeardownReport:
        return self.runner.stop(
            handle, gpus_from_env(server_env), memory_limit=memory_limit, grace_s=grace_s
        )

    def is_alive(self, handle: ServerHandle) -> bool:
        return self.runner.is_alive(handle)

    def tail(self, handle: ServerHandle, lines: int = 20) -> list[str]:
        return self.runner.tail(handle, lines)

    def workdir(self) -> str:
        return str(self.runner.workdir.resolve())

    def write_file(self, path: str, data: bytes) -> None:
        """Atomically (temp file, then rename): a server never reads half a file."""
        write_atomic(Path(path), data)

    def read_log(self, handle: ServerHandle, offset: int) -> tuple[str, int]:
        return read_from(handle.log_path, offset)

    def sglang_version(self, server: ServerSpec) -> SglangVersion:
        return probed_version(run_probe(probe_argv(server), probe_env(server), "this machine"))


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
