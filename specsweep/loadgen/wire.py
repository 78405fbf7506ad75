"""A level's result as one JSON line, and back: how a remote load generator reports.

``python -m specsweep.loadgen`` runs on the GPU host (next to the server, so
the network between them is not measured) and prints JSON lines; the caller
rebuilds the ``LevelResult`` with ``parse_result_line``. JSON has no NaN, so
NaN metrics travel as null and come back as NaN; floats round-trip exactly
(shortest representation).
"""

from __future__ import annotations

import math
from dataclasses import fields
from datetime import datetime
from typing import Any

import orjson

from specsweep.errors import WireError
from specsweep.loadgen.metrics import LevelMetrics, RequestRecord
from specsweep.loadgen.runner import LevelResult
from specsweep.results.drift import Drift

# LevelMetrics fields that are plain floats (NaN when undefined), as opposed to
# `float | None` ones where null means "not reported".
_NAN_FIELDS = frozenset(f.name for f in fields(LevelMetrics) if f.type == "float")


def _metrics_to_json(m: LevelMetrics) -> dict[str, Any]:
    items = m.as_dict().items()
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in items}


def _metrics_from_json(data: dict[str, Any]) -> LevelMetrics:
    kw = {k: math.nan if v is None and k in _NAN_FIELDS else v for k, v in data.items()}
    return LevelMetrics(**kw)


def result_to_json(result: LevelResult) -> dict[str, Any]:
    """The ``result`` event of a level (everything needed to rebuild it)."""
    return {
        "event": "result",
        "metrics": _metrics_to_json(result.metrics),
        "repeats": [_metrics_to_json(m) for m in result.repeats],
        "records": [r.as_dict() for r in result.records],
        "started_at": result.started_at.isoformat(),
        "ended_at": result.ended_at.isoformat(),
        "perf_origin": result.perf_origin,
    }


def drift_json(drift: Drift) -> str:
    """The run's drift as the remote load generator's ``--drift`` argument."""
    return orjson.dumps({"sd": drift.sd, "df": drift.df, "source": drift.source}).decode()


def parse_drift(text: str) -> Drift:
    """The inverse of drift_json; WireError when it is not one."""
    try:
        data = orjson.loads(text)
        return Drift(float(data["sd"]), int(data["df"]), str(data["source"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise WireError(f"not a drift: {exc}: {text[:80]!r}") from None


def result_line(result: LevelResult) -> bytes:
    return orjson.dumps(result_to_json(result)) + b"\n"


def progress_line(done: int, total: int) -> bytes:
    return orjson.dumps({"event": "progress", "done": done, "total": total}) + b"\n"


def parse_line(line: str | bytes) -> dict[str, Any]:
    """Any event line, as a dict with an "event" key."""
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        head = line[:80]
        raise WireError(f"not a JSON line: {exc}: {head!r}") from None
    if not isinstance(event, dict) or "event" not in event:
        raise WireError("not an event object")
    return event


def parse_result_line(line: str | bytes) -> LevelResult:
    """Rebuild the LevelResult from the ``result`` line that the CLI printed."""
    event = parse_line(line.encode() if isinstance(line, str) else line)
    if event["event"] != "result":
        raise WireError(f"expected a result event, got {event['event']!r}")
    try:
        origin = event["perf_origin"]
        return LevelResult(
            metrics=_metrics_from_json(event["metrics"]),
            records=tuple(RequestRecord.from_dict(r) for r in event["records"]),
            started_at=datetime.fromisoformat(event["started_at"]),
            ended_at=datetime.fromisoformat(event["ended_at"]),
            repeats=tuple(_metrics_from_json(m) for m in event["repeats"]),
            perf_origin=math.nan if origin is None else float(origin),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"malformed result event: {type(exc).__name__}: {exc}") from None
