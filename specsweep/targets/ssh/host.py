"""SSH targets: the lifecycle runs on the GPU host, driven over one connection.

Cleanup, launch, the readiness wait and teardown run on the host as the
local target's own code (``python -m specsweep.targets.agent``), and the load
generator runs there too (``python -m specsweep.loadgen``) so the network
between this machine and the host is not part of the measurement, unless
``drive_from: orchestrator`` asks for health checks and load from here.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specsweep.config import WILDCARD_HOSTS, LoadSpec, ServerSpec, SshTarget
from specsweep.config.command import LaunchCommand
from specsweep.config.versions import SglangVersion
from specsweep.errors import RemoteError
from specsweep.loadgen.runner import LevelResult, run_level_sync
from specsweep.loadgen.wire import drift_json, parse_result_line
from specsweep.results.drift import Drift
from specsweep.targets import wire
from specsweep.targets.cleanup import CleanupReport
from specsweep.targets.handle import ServerHandle
from specsweep.targets.health import Readiness, ReadyReport, wait_until_ready
from specsweep.targets.host import LevelProgress, ReadyProgress
from specsweep.targets.server_facts import ServerFacts
from specsweep.targets.sglang_version import probe_argv, probe_env, probed_version
from specsweep.targets.ssh.session import SshSession
from specsweep.targets.teardown import TeardownReport

__all__ = ["SshHost", "host_for", "level_timeout_s"]


def level_timeout_s(load: LoadSpec, concurrency: int) -> float:
    """An upper bound for one level: every request of every pass at its timeout."""
    passes = load.max_passes(concurrency)
    waves = math.ceil((load.num_requests(concurrency) + load.num_warmup(concurrency)) / concurrency)
    return passes * (waves + 1) * load.request_timeout_s + 60.0


class SshHost(SshSession):
    """A GPU host behind SSH; implements targets.host.Host."""

    def kill_stale(
        self,
        port: int,
        server_env: Mapping[str, str],
        *,
        force: bool,
        tolerate_foreign_gpu: bool,
        grace_s: float = 15.0,
    ) -> CleanupReport:
        payload = {
            "workdir": self.workdir(),
            "port": port,
            "server_env": dict(server_env),
            "force": force,
            "tolerate_foreign_gpu": tolerate_foreign_gpu,
            "grace_s": grace_s,
        }
        limit = self.target.command_timeout_s + 2 * grace_s + 60.0  # kills + GPU memory wait
        # private: server_env may hold tokens, which a command line shows to every user
        value = self.agent("kill-stale", payload, limit, private=True)
        return wire.cleanup_from_json(value)

    def log_path(self, run_id: str, label: str) -> Path:
        return Path(self.workdir()) / "logs" / run_id / f"{label}.log"

    def start(self, cmd: LaunchCommand, log_path: Path, port: int) -> ServerHandle:
        payload = {
            "workdir": self.workdir(),
            "argv": list(cmd.argv),
            "env": dict(cmd.env),  # may hold tokens: sent as a 0600 file, never in a command line
            "log_path": str(log_path),
            "port": port,
        }
        value = self.agent("start", payload, retry=False, private=True)
        return wire.handle_from_json(value)

    def _handle_payload(self, handle: ServerHandle) -> dict[str, Any]:
        return {"workdir": self.workdir(), "handle": wire.handle_to_json(handle)}

    def wait_ready(
        self, handle: ServerHandle, server: ServerSpec, on_progress: ReadyProgress | None = None
    ) -> ReadyReport:
        if self.target.drive_from == "orchestrator":
            return self._wait_from_here(handle, server, on_progress)

        def progress(event: dict[str, Any]) -> None:
            if on_progress is not None and event.get("event") == "progress":
                on_progress(Readiness(event["state"]), event.get("line", ""))

        payload = {**self._handle_payload(handle), "server": server.model_dump(mode="json")}
        limit = server.startup_timeout_s + 60.0
        value = self.agent("wait-ready", payload, limit, progress, private=True)  # server.env
        return wire.ready_from_json(value)

    def _wait_from_here(
        self, handle: ServerHandle, server: ServerSpec, on_progress: ReadyProgress | None
    ) -> ReadyReport:
        """Health polled from here; liveness and log lines streamed from the host."""
        payload = {**self._handle_payload(handle), "max_s": server.startup_timeout_s + 60.0}
        with self.stream_agent("watch", payload, server.startup_timeout_s + 90.0) as watch:

            def alive() -> bool:
                if watch.latest.get("alive") is False:
                    return False
                if watch.ended.is_set():  # the watch itself was lost: ask once more
                    return bool(self.agent("alive", self._handle_payload(handle)))
                return True

            def tail(n: int) -> list[str]:
                lines = list(watch.latest.get("lines", []))
                if watch.latest.get("alive") is False or (n <= 10 and not watch.ended.is_set()):
                    return lines[-n:]
                return self.tail(handle, n)

            return wait_until_ready(
                self.orchestrator_url(server),
                is_alive=alive,
                tail_log=tail,
                timeout_s=server.startup_timeout_s,
                on_progress=on_progress,
            )

    def orchestrator_url(self, server: ServerSpec) -> str:
        return server.url_via(self.target.host if server.host in WILDCARD_HOSTS else server.host)

    def facts(self, server: ServerSpec) -> ServerFacts:
        payload = {"server": server.model_dump(mode="json")}
        value = self.agent("facts", payload, private=True)  # server.env may hold tokens
        return wire.facts_from_json(value)

    def run_level(
        self,
        server: ServerSpec,
        concurrency: int,
        load: LoadSpec,
        on_progress: LevelProgress | None = None,
        drift: Drift | None = None,
    ) -> LevelResult:
        if self.target.drive_from == "orchestrator":
            url = self.orchestrator_url(server)
            return run_level_sync(url, concurrency, load, on_progress=on_progress, drift=drift)
        if load.dataset is not None:
            load = load.model_copy(update={"dataset": Path(self._put_dataset(load.dataset))})
        result: list[dict[str, Any]] = []

        def handle(event: dict[str, Any]) -> None:
            kind = event.get("event")
            if kind == "progress" and on_progress is not None:
                on_progress(int(event["done"]), int(event["total"]))
            elif kind in ("result", "error"):
                result[:] = [event]

        args = ["-m", "specsweep.loadgen", "--base-url", server.base_url]
        args += ["--concurrency", str(concurrency), "--load", load.model_dump_json()]
        if drift is not None:
            args += ["--drift", drift_json(drift)]
        limit = level_timeout_s(load, concurrency)
        self._python(args, limit, handle, retry=True, what=f"load generator c={concurrency}")
        if not result or result[0].get("event") != "result":
            message = result[0].get("message") if result else "no result line"
            raise RemoteError(f"{self.target.address}: load generator failed: {message}")
        return parse_result_line(json.dumps(result[0]))

    def _put_dataset(self, path: Path) -> str:
        data = Path(path).read_bytes()
        name = f"datasets/{hashlib.sha256(data).hexdigest()[:16]}-{Path(path).name}"
        remote = f"{self.workdir()}/{name}"
        limit = self.target.command_timeout_s
        self.run(self._q("mkdir", "-p", f"{self.workdir()}/datasets"), limit)
        self.connection().sftp().putfo(io.BytesIO(data), remote)
        return remote

    def stop(
        self,
        handle: ServerHandle,
        server_env: Mapping[str, str],
        *,
        memory_limit: dict[int, int] | None = None,
        grace_s: float = 15.0,
    ) -> TeardownReport:
        payload = {
            **self._handle_payload(handle),
            "server_env": dict(server_env),
            "memory_limit": memory_limit,
            "grace_s": grace_s,
        }
        limit = 2 * grace_s + self.target.command_timeout_s + 60.0  # kills + GPU memory wait
        # private: server_env may hold tokens, which a command line shows to every user
        return wire.teardown_from_json(self.agent("stop", payload, limit, private=True))

    def is_alive(self, handle: ServerHandle) -> bool:
        return bool(self.agent("alive", self._handle_payload(handle)))

    def tail(self, handle: ServerHandle, lines: int = 20) -> list[str]:
        return list(self.agent("tail", {**self._handle_payload(handle), "lines": lines}))

    def write_file(self, path: str, data: bytes) -> None:
        """Copied over SFTP to a temp name, then renamed: the server never reads half a file."""
        limit = self.target.command_timeout_s
        parent = path.rsplit("/", 1)[0] if "/" in path else "."
        self.run(self._q("mkdir", "-p", parent), limit)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        self.connection().sftp().putfo(io.BytesIO(data), tmp)
        rc, err = self.run(self._q("mv", "-f", tmp, path), limit)
        if rc != 0:
            raise RemoteError(f"{self.target.address}: cannot write {path}: {' '.join(err)}")

    def read_log(self, handle: ServerHandle, offset: int) -> tuple[str, int]:
        value = self.agent("read-log", {**self._handle_payload(handle), "offset": offset})
        return str(value["text"]), int(value["offset"])

    def sglang_version(self, server: ServerSpec) -> SglangVersion:
        payload = {
            "argv": probe_argv(server, self.target.python),
            "env": probe_env(server),
            "where": self.target.address,
        }
        return probed_version(str(self.agent("sglang-version", payload, private=True)))


_hosts: dict[str, SshHost] = {}
_hosts_lock = threading.Lock()


def host_for(target: SshTarget) -> SshHost:
    """One connection per target per process, shared by the pipeline's steps."""
    key = target.model_dump_json()
    with _hosts_lock:
        if key not in _hosts:
            _hosts[key] = SshHost(target)
        return _hosts[key]
