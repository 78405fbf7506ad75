"""Engine results as JSON and back: what the remote agent prints and the caller rebuilds.

JSON object keys are strings, so the per-GPU maps (index -> MiB) are rebuilt
with int keys; timestamps travel as ISO 8601.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path
from typing import Any

from specsweep.targets.cleanup import CleanupReport
from specsweep.targets.handle import ServerHandle
from specsweep.targets.health import Readiness, ReadyReport
from specsweep.targets.process import KillReport
from specsweep.targets.server_facts import ServerFacts
from specsweep.targets.teardown import TeardownReport


def handle_to_json(h: ServerHandle) -> dict[str, Any]:
    data = dataclasses.asdict(h)
    data["log_path"] = str(h.log_path)
    data["started_at"] = h.started_at.isoformat()
    return data


def handle_from_json(data: dict[str, Any]) -> ServerHandle:
    return ServerHandle(
        **{
            **data,
            "log_path": Path(data["log_path"]),
            "started_at": datetime.fromisoformat(data["started_at"]),
        }
    )


def kill_to_json(r: KillReport) -> dict[str, Any]:
    return dataclasses.asdict(r)


def kill_from_json(data: dict[str, Any]) -> KillReport:
    return KillReport(**data)


def _int_keys(d: dict[str, int]) -> dict[int, int]:
    return {int(k): v for k, v in d.items()}


def teardown_to_json(r: TeardownReport) -> dict[str, Any]:
    return dataclasses.asdict(r)


def teardown_from_json(data: dict[str, Any]) -> TeardownReport:
    maps = ("memory_before", "memory_after", "memory_limit")
    return TeardownReport(**{**data, **{m: _int_keys(data[m]) for m in maps}})


def cleanup_to_json(r: CleanupReport) -> dict[str, Any]:
    return dataclasses.asdict(r)


def cleanup_from_json(data: dict[str, Any]) -> CleanupReport:
    maps = ("memory_before", "memory_after", "memory_limit")
    return CleanupReport(
        **{
            **data,
            "killed": [kill_from_json(k) for k in data["killed"]],
            **{m: _int_keys(data[m]) for m in maps},
            "timeline": [(t, _int_keys(used)) for t, used in data["timeline"]],
        }
    )


def ready_to_json(r: ReadyReport) -> dict[str, Any]:
    return {
        "elapsed_s": r.elapsed_s,
        "polls": r.polls,
        "transitions": [[t, str(s)] for t, s in r.transitions],
    }


def ready_from_json(data: dict[str, Any]) -> ReadyReport:
    transitions = [(t, Readiness(s)) for t, s in data["transitions"]]
    return ReadyReport(data["elapsed_s"], data["polls"], transitions)


def facts_to_json(f: ServerFacts) -> dict[str, Any]:
    return dataclasses.asdict(f)


def facts_from_json(data: dict[str, Any]) -> ServerFacts:
    return ServerFacts(**data)
