"""Who holds a target's slot, so a slot held by a dead orchestrator can be freed.

A SIGKILLed `specsweep run` cannot release its slot, and an ephemeral Prefect API
(the CLI without a server, the test harness) never runs the service that expires
leases: the target would stay "busy" forever. The holder therefore leaves a
Prefect Variable naming itself (host, pid, start time, flow run); a flow that
finds the slot taken frees it only when that holder is provably gone: its
process is dead on this very host, or its flow run reached a final state. A holder
that lets go marks its record released (it names no process, so it proves nothing).
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

import psutil
from prefect.client.orchestration import SyncPrefectClient
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run
from prefect.variables import Variable


def variable_name(lock: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "_", f"{lock}-holder")


def _me() -> dict[str, Any]:
    proc = psutil.Process()
    return {
        "hostname": socket.gethostname(),
        "pid": proc.pid,
        "create_time": proc.create_time(),
        "flow_run_id": str(flow_run.id) if flow_run.id else None,
        "since": datetime.now(UTC).isoformat(),
    }


def record(lock: str) -> None:
    Variable.set(variable_name(lock), _me(), overwrite=True)


def clear(lock: str) -> None:
    """Mark our record released (a record naming no process: nothing to prove gone).

    An update, not a delete: on SQLite, Prefect's DELETE reads the variable, emits its
    event, then deletes in a deferred transaction, and a write committed in between
    (the event's own consumers) fails it with "database is locked": a 503 that the client
    retries after 2 s, at the end of every variant (seen in every flow test's server log).
    """
    holder = Variable.get(variable_name(lock))
    if isinstance(holder, dict) and holder.get("pid") == os.getpid():
        _mark_released(lock)


def _mark_released(lock: str) -> None:
    Variable.set(variable_name(lock), {"released": datetime.now(UTC).isoformat()}, overwrite=True)


def why_gone(client: SyncPrefectClient, holder: dict[str, Any]) -> str | None:
    """The proof that the recorded holder is gone, or None while it may be alive."""
    if holder.get("hostname") == socket.gethostname():
        pid = int(holder.get("pid") or 0)
        try:
            same = abs(psutil.Process(pid).create_time() - float(holder["create_time"])) < 0.01
        except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError):
            same = False
        if not same:
            return f"its orchestrator (pid {pid} on this host) is gone"
    run_id = holder.get("flow_run_id")
    if run_id:
        try:
            run = client.read_flow_run(uuid.UUID(run_id))
        except ObjectNotFound:
            return f"its flow run {run_id} no longer exists"
        if run.state is not None and run.state.is_final():
            return f"its flow run {run.name} is {run.state.name}"
    return None


def free_if_holder_gone(client: SyncPrefectClient, lock: str) -> str | None:
    """Release the slot of a holder that is provably gone; the reason, or None."""
    holder = Variable.get(variable_name(lock))
    if not isinstance(holder, dict):
        return None
    reason = why_gone(client, holder)
    if reason is None:
        return None
    try:
        since = datetime.fromisoformat(str(holder.get("since")))
        held_s = max((datetime.now(UTC) - since).total_seconds(), 0.001)
    except ValueError:
        held_s = 0.001
    client.release_concurrency_slots(names=[lock], slots=1, occupancy_seconds=held_s)
    _mark_released(lock)
    return reason
