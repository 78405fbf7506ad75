"""specsweep's helper on an SSH target: ``python -m specsweep.targets.agent OP``.

The orchestrator copies the specsweep package to the GPU host and runs one
operation per SSH command, so cleanup, launch, the readiness wait and
teardown run there with exactly the code the local target uses (psutil,
nvidia-smi, process groups). The request is a JSON object, base64 in
``--payload`` or in a 0600 file given by ``--payload-file`` (deleted once
read; used when it holds secrets such as an HF token, which must not appear
in any command line). Stdout carries JSON lines: optional ``progress``
events, then one ``result`` or ``error`` event. Exit status 0 with a result,
3 with an error event, 2 for a malformed request.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsweep.errors import ServerStartError, SpecsweepError

if TYPE_CHECKING:  # imported lazily at run time: `kill-op` needs none of it
    from specsweep.targets.handle import ServerHandle
    from specsweep.targets.local import LocalHost

OP_ID_ENV = "SPECSWEEP_OP_ID"
EXIT_ERROR = 3
EXIT_BAD_REQUEST = 2

Emit = Callable[[dict[str, Any]], None]


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()  # a closed channel fails here: the agent does not outlive its caller


def _host(payload: dict[str, Any]) -> LocalHost:
    from specsweep.targets.local import LocalHost

    return LocalHost(Path(payload["workdir"]).expanduser())


def _handle(payload: dict[str, Any]) -> ServerHandle:
    from specsweep.targets.wire import handle_from_json

    return handle_from_json(payload["handle"])


def op_start(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.config.command import LaunchCommand
    from specsweep.targets.wire import handle_to_json

    os.environ.pop(OP_ID_ENV, None)  # the server must not be killed as part of this command
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup: inherited through exec
    cmd = LaunchCommand(tuple(p["argv"]), p["env"])
    log_path = Path(p["log_path"]).expanduser().absolute()
    return handle_to_json(_host(p).start(cmd, log_path, int(p["port"])))


def op_kill_stale(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.targets.wire import cleanup_to_json

    report = _host(p).kill_stale(
        int(p["port"]),
        p["server_env"],
        force=bool(p["force"]),
        tolerate_foreign_gpu=bool(p["tolerate_foreign_gpu"]),
        grace_s=float(p.get("grace_s", 15.0)),
    )
    return cleanup_to_json(report)


def op_wait_ready(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.config import ServerSpec
    from specsweep.targets.wire import ready_to_json

    def progress(state: Any, line: str) -> None:
        emit({"event": "progress", "state": str(state), "line": line})

    server = ServerSpec.model_validate(p["server"])
    return ready_to_json(_host(p).wait_ready(_handle(p), server, progress))


def op_facts(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.config import ServerSpec
    from specsweep.targets.server_facts import server_facts
    from specsweep.targets.wire import facts_to_json

    return facts_to_json(server_facts(ServerSpec.model_validate(p["server"])))


def op_stop(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.targets.wire import teardown_to_json

    limit = {int(g): int(m) for g, m in (p.get("memory_limit") or {}).items()}
    report = _host(p).stop(
        _handle(p),
        p.get("server_env") or {},
        memory_limit=limit or None,
        grace_s=float(p.get("grace_s", 15.0)),
    )
    return teardown_to_json(report)


def op_tail(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.targets.handle import tail_file

    return tail_file(Path(p["handle"]["log_path"]), int(p.get("lines", 20)))


def op_read_log(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.targets.handle import read_from

    text, offset = read_from(Path(p["handle"]["log_path"]), int(p.get("offset", 0)))
    return {"text": text, "offset": offset}


def op_sglang_version(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.targets.sglang_version import run_probe

    return run_probe(list(p["argv"]), dict(p.get("env") or {}), str(p.get("where", "target")))


def op_alive(p: dict[str, Any], emit: Emit) -> Any:
    from specsweep.targets import process

    return process.is_running(int(p["handle"]["pid"]), float(p["handle"]["create_time"]))


def op_watch(p: dict[str, Any], emit: Emit) -> Any:
    """Stream liveness and the log's last lines until the server dies (or max_s passes).

    One long-lived command instead of a remote process per check: a crash is seen
    within `interval_s`, and a closed channel ends the watch at its next write.
    """
    import time

    from specsweep.targets import process
    from specsweep.targets.handle import tail_file

    h = p["handle"]
    interval, end = float(p.get("interval_s", 0.1)), time.monotonic() + float(p["max_s"])
    while time.monotonic() < end:
        alive = process.is_running(int(h["pid"]), float(h["create_time"]))
        lines = tail_file(Path(h["log_path"]), 10 if alive else 30)  # 30: the error's tail
        emit({"event": "progress", "alive": alive, "lines": lines})
        if not alive:
            return False
        time.sleep(interval)
    return True


def op_kill_op(p: dict[str, Any], emit: Emit) -> Any:
    """Stop what an earlier command left running after its connection was lost."""
    import psutil

    from specsweep.targets import process

    me, uid = os.getpid(), os.getuid()
    tagged = []
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.pid == me or proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if proc.environ().get(OP_ID_ENV) == p["op_id"]:
                tagged.append(proc)
        except (psutil.Error, OSError):
            continue
    if not tagged:
        return []
    return process.kill_processes(tagged, grace_s=float(p.get("grace_s", 5.0))).terminated


OPS: dict[str, Callable[[dict[str, Any], Emit], Any]] = {
    "start": op_start,
    "kill-stale": op_kill_stale,
    "wait-ready": op_wait_ready,
    "facts": op_facts,
    "stop": op_stop,
    "tail": op_tail,
    "read-log": op_read_log,
    "sglang-version": op_sglang_version,
    "alive": op_alive,
    "watch": op_watch,
    "kill-op": op_kill_op,
}


def error_event(exc: BaseException) -> dict[str, Any]:
    event: dict[str, Any] = {"event": "error", "kind": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ServerStartError):
        event.update(message=exc.reason, log_tail=exc.log_tail)
    return event


def _read_payload(args: argparse.Namespace) -> dict[str, Any]:
    if args.payload_file:
        path = Path(args.payload_file).expanduser()
        try:
            raw = path.read_bytes()
        finally:
            path.unlink(missing_ok=True)
    else:
        raw = base64.b64decode(args.payload or "e30=")
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the payload must be a JSON object")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsweep.targets.agent")
    parser.add_argument("op", choices=sorted(OPS))
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--payload", help="the request, base64 of a JSON object")
    src.add_argument("--payload-file", help="file holding the JSON request; deleted once read")
    try:
        args = parser.parse_args(argv)
        payload = _read_payload(args)
    except SystemExit as exc:
        return EXIT_BAD_REQUEST if exc.code else 0
    except (OSError, ValueError) as exc:
        _emit({"event": "error", "kind": "BadRequest", "message": str(exc)})
        return EXIT_BAD_REQUEST
    try:
        value = OPS[args.op](payload, _emit)
    except (SpecsweepError, OSError, RuntimeError, ValueError) as exc:
        _emit(error_event(exc))
        return EXIT_ERROR
    _emit({"event": "result", "value": value})
    return 0


if __name__ == "__main__":
    sys.exit(main())
