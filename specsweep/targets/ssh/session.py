"""One SSH connection to a GPU host and specsweep's helper code on it.

The session copies specsweep's own package to the host (once per version,
content addressed) and runs its modules there with the target's Python
(sglang's venv has every module they need). Every remote command is built
with shlex quoting, runs without a pty under ``timeout`` (a lost connection
cannot leave it running forever) and carries an operation id in its
environment so that, after a reconnect, whatever the lost command left
behind is stopped before the command is retried.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut

from specsweep.config import SshTarget, secrets
from specsweep.errors import (
    ConfigError,
    RemoteError,
    SshCommandTimeout,
    SshConnectError,
    SshConnectionLost,
    SshError,
)
from specsweep.targets.agent import OP_ID_ENV
from specsweep.targets.ssh.errors import map_connect_error, rebuild_error
from specsweep.targets.ssh.io import (
    AgentStream,
    LineSink,
    load_private_key,
    package_tarball,
    parse_event,
)

log = logging.getLogger(__name__)


def _secret(name: str, what: str) -> str:
    return secrets.resolve(name, f"target.{what}")


# -- the package copied to the host -------------------------------------------------


class SshSession:
    """A connection to one target that reconnects, runs commands and the agent."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target
        self._conn: Connection | None = None
        self._lock = threading.RLock()
        self._workdir: str | None = None
        self._lib: str | None = None

    # -- connection -------------------------------------------------------------

    def _new_connection(self) -> Connection:
        t = self.target
        limit = t.connect_timeout_s
        kwargs: dict[str, Any] = {"banner_timeout": limit, "auth_timeout": limit}
        passphrase = None
        if t.passphrase_secret:
            passphrase = _secret(t.passphrase_secret, "passphrase_secret")
        if t.key_file is not None:
            kwargs.update(key_filename=str(t.key_file.expanduser()), look_for_keys=False)
            kwargs.update(allow_agent=False, passphrase=passphrase)
        elif t.key_secret is not None:
            kwargs.update(pkey=load_private_key(_secret(t.key_secret, "key_secret"), passphrase))
            kwargs.update(look_for_keys=False, allow_agent=False)
        conn = Connection(
            t.host,
            user=t.user,
            port=t.port,
            connect_timeout=max(1, math.ceil(limit)),
            connect_kwargs=kwargs,
        )
        if t.verify_host_key:
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
            known = (t.known_hosts or Path("~/.ssh/known_hosts")).expanduser()
            if known.is_file():
                conn.client.load_host_keys(str(known))
        else:
            conn.client.set_missing_host_key_policy(paramiko.WarningPolicy())
        return conn

    def connection(self) -> Connection:
        """The open connection; (re)connects with backoff while the host is unreachable."""
        with self._lock:
            conn = self._conn
            if conn is not None and conn.transport is not None and conn.transport.is_active():
                return conn
            self.close()
            delay = 1.0
            for attempt in range(1, self.target.connect_attempts + 1):
                conn = self._new_connection()
                try:
                    conn.open()
                except Exception as exc:  # any failure to connect is mapped to a message
                    conn.close()
                    err = map_connect_error(exc, self.target)
                    last = attempt == self.target.connect_attempts
                    if last or not isinstance(err, SshConnectError):
                        raise err from exc
                    log.warning(
                        "%s (attempt %d of %d); retrying in %.0fs",
                        err, attempt, self.target.connect_attempts, delay,
                    )  # fmt: skip
                    time.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
                conn.transport.set_keepalive(10)
                self._conn = conn
                return conn
            raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def _connected(self) -> bool:
        conn = self._conn
        return conn is not None and conn.transport is not None and conn.transport.is_active()

    # -- commands ---------------------------------------------------------------

    def run(
        self,
        command: str,
        timeout_s: float,
        on_line: Callable[[str], None] | None = None,
    ) -> tuple[int, list[str]]:
        """Run a shell command line; returns (exit status, last stderr lines)."""
        conn = self.connection()
        out, err = LineSink(on_line), LineSink(None, keep=20)
        what = command if len(command) < 120 else command[:117] + "..."
        try:
            res = conn.run(
                command,
                hide=False,
                warn=True,
                pty=False,
                in_stream=False,
                out_stream=out,
                err_stream=err,
                timeout=timeout_s,
            )
        except CommandTimedOut as exc:
            self.close()  # the channel is in an unknown state
            raise SshCommandTimeout(
                f"{self.target.address}: remote command timed out after {timeout_s:.0f}s: {what}"
            ) from exc
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self.close()
            raise SshConnectionLost(
                f"connection to {self.target.address} lost during: {what} ({exc})"
            ) from exc
        out.close_out()
        err.close_out()
        if res.exited in (None, -1):
            if not self._connected():
                self.close()
                raise SshConnectionLost(f"connection to {self.target.address} lost during: {what}")
            raise RemoteError(f"{self.target.address}: killed by a signal: {what}")
        return res.exited, err.kept

    def _q(self, *argv: str) -> str:
        return " ".join(shlex.quote(a) for a in argv)

    def workdir(self) -> str:
        """The target's workdir as an absolute path (created on first use)."""
        if self._workdir is None:
            lines: list[str] = []
            wd = self.target.workdir
            cmd = f"mkdir -p -- {shlex.quote(wd)} && cd -- {shlex.quote(wd)} && pwd"
            rc, err = self.run(cmd, self.target.command_timeout_s, lines.append)
            if rc != 0 or not lines:
                raise RemoteError(f"{self.target.address}: cannot create {wd}: {' '.join(err)}")
            self._workdir = lines[-1].strip()
        return self._workdir

    def lib(self) -> str:
        """Where this version of specsweep lives on the host; copied there if missing."""
        if self._lib is not None:
            return self._lib
        data, digest = package_tarball()
        lib = f"{self.workdir()}/lib/{digest}"
        limit = self.target.command_timeout_s
        rc, _ = self.run(self._q("test", "-f", f"{lib}/.complete"), limit)
        if rc != 0:
            tmp = f"{self.workdir()}/lib/.{digest}.{uuid.uuid4().hex}.tar.gz"
            self.run(self._q("mkdir", "-p", f"{self.workdir()}/lib"), limit)
            self.connection().sftp().putfo(io.BytesIO(data), tmp)
            rc, err = self.run(
                f"mkdir -p {shlex.quote(lib)} && tar -xzf {shlex.quote(tmp)} -C {shlex.quote(lib)}"
                f" && rm -f {shlex.quote(tmp)} && touch {shlex.quote(lib + '/.complete')}",
                limit,
            )
            if rc != 0:
                raise RemoteError(
                    f"{self.target.address}: cannot unpack specsweep in {lib}: {' '.join(err)}"
                )
            log.info("copied specsweep %s to %s:%s", digest, self.target.host, lib)
        self._lib = lib
        return lib

    def _python_command(self, args: list[str], op_id: str, timeout_s: float) -> str:
        env = [f"PYTHONPATH={self.lib()}", f"{OP_ID_ENV}={op_id}"]
        limit = str(math.ceil(timeout_s))
        return self._q("env", *env, "timeout", "-k", "5", limit, self.target.python, *args)

    def _put_private(self, name: str, data: bytes) -> str:
        path = f"{self.workdir()}/.{name}"
        with self.connection().sftp().open(path, "wb") as fh:
            fh.chmod(0o600)
            fh.write(data)
        return path

    def _python(
        self,
        args: list[str],
        timeout_s: float,
        on_event: Callable[[dict[str, Any]], None],
        *,
        retry: bool,
        what: str,
        private: bytes | None = None,
    ) -> int:
        """Run a specsweep module on the host; retried once after a lost connection."""
        for attempt in (1, 2):
            op_id = uuid.uuid4().hex
            argv = list(args)
            if private is not None:
                argv += ["--payload-file", self._put_private(f"payload-{op_id}", private)]
            command = self._python_command(argv, op_id, timeout_s)
            try:
                rc, err = self.run(command, timeout_s + 30, lambda ln: on_event(parse_event(ln)))
            except SshConnectionLost as exc:
                if not retry or attempt == 2:
                    raise
                log.warning("%s; reconnecting to retry %s", exc, what)
                self._kill_op(op_id)
                continue
            if rc == 124:
                raise SshCommandTimeout(
                    f"{self.target.address}: {what} did not finish within {timeout_s:.0f}s"
                )
            if rc == 127:
                raise ConfigError(
                    f"{self.target.address}: {self.target.python!r} not found there "
                    f"(set target.python): {' '.join(err)}"
                )
            missing = next((ln for ln in reversed(err) if "ModuleNotFoundError" in ln), None)
            if rc != 0 and missing is not None:
                raise ConfigError(
                    f"{self.target.address}: {self.target.python!r} lacks a module specsweep's "
                    f"helper needs ({missing.strip()}); point target.python at the sglang "
                    "venv's python, which has them all (psutil, requests, pydantic, orjson, "
                    "uvloop, pyyaml)"
                )
            if rc not in (0, 3):
                raise RemoteError(
                    f"{self.target.address}: {what} exited with status {rc}: "
                    + " | ".join(err[-5:])
                )
            return rc
        raise AssertionError("unreachable")

    def agent(
        self,
        op: str,
        payload: Mapping[str, Any],
        timeout_s: float | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        *,
        retry: bool = True,
        private: bool = False,
    ) -> Any:
        """One agent operation; its result value, or its error raised here."""
        final: dict[str, Any] = {}

        def handle(event: dict[str, Any]) -> None:
            if event.get("event") in ("result", "error"):
                final.clear()
                final.update(event)
            elif on_event is not None:
                on_event(event)

        data = json.dumps(payload).encode()
        args = ["-m", "specsweep.targets.agent", op]
        if not private:
            args += ["--payload", base64.b64encode(data).decode()]
        limit = timeout_s if timeout_s is not None else self.target.command_timeout_s
        self._python(
            args, limit, handle, retry=retry, what=f"agent {op}",
            private=data if private else None,
        )  # fmt: skip
        if final.get("event") == "result":
            return final["value"]
        if final.get("event") == "error":
            raise rebuild_error(final, self.target.host)
        raise RemoteError(f"{self.target.address}: agent {op} ended without an answer")

    @contextmanager
    def stream_agent(
        self, op: str, payload: Mapping[str, Any], timeout_s: float
    ) -> Iterator[AgentStream]:
        """A long-running agent operation whose events are read in the background."""
        op_id = uuid.uuid4().hex
        data = base64.b64encode(json.dumps(payload).encode()).decode()
        args = ["-m", "specsweep.targets.agent", op, "--payload", data]
        command = self._python_command(args, op_id, timeout_s)
        channel = self.connection().transport.open_session()
        channel.exec_command(command)
        stream = AgentStream(channel)
        try:
            yield stream
        finally:
            channel.close()  # the agent's next write fails and it exits; the reader sees EOF

    def _kill_op(self, op_id: str) -> None:
        try:
            killed = self.agent("kill-op", {"op_id": op_id}, retry=False)
        except SshError as exc:
            log.warning("could not stop lost command %s on %s: %s", op_id, self.target.host, exc)
            return
        if killed:
            log.warning("stopped what the lost command left running: pids %s", killed)
