"""A fleet host's names on the Prefect server: its work queue and its GPU facts.

Pinning: every host's worker polls its own work queue in the fleet's pool (`host_queue`)
besides the pool's default one, which only it polls, so a run submitted there (a host's
baseline or calibration) goes to that host and no other; the host queue outranks the
default queue, so a pinned run is taken before the shared variants queued ahead of it.

Facts: `specsweep fleet worker` runs the host's pre-flight check before it takes work; what the
check saw (GPU name, count, driver) goes to a Prefect Variable named after the pool and the
host. The fleet sweep reads the variables of the hosts online to group them by GPU kind
before anything runs. A worker started without the check removes its variable: a stale
one could name GPUs the host no longer has (a host without facts has an unknown kind and
measures its own baseline).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specsweep.targets.server_facts import ServerFacts

FACTS_KEYS = ("gpu_name", "gpu_count", "driver_version")
# Prefect Variable names: lowercase letters, digits, dashes and underscores, at most 255.
_NOT_ALLOWED = re.compile(r"[^a-z0-9_-]")
_MAX_NAME = 255


def host_queue(host: str) -> str:
    """The work queue only `host`'s worker polls (host names use the run-id alphabet, which
    Prefect's queue names take as they are)."""
    return f"host-{host}"


def facts_variable(pool: str, host: str) -> str:
    """The Variable of `host` in work pool `pool`: readable when both names fit Prefect's
    alphabet; otherwise folded into it with a hash of the exact names appended, so
    `GPU-A` and `gpu-a` (or a.1 and a_1) never share a variable."""
    raw = f"specsweep-facts-{pool}-{host}"
    name = _NOT_ALLOWED.sub("_", raw.lower())
    if name == raw and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{pool}\0{host}".encode()).hexdigest()[:12]
    return f"{name[: _MAX_NAME - len(digest) - 1]}-{digest}"


def facts_value(facts: ServerFacts, host: str) -> dict[str, Any]:
    """The JSON a worker publishes (small: a Variable holds at most 5000 characters)."""
    return {
        "host": host,
        "gpu_name": facts.gpu_name,
        "gpu_count": facts.gpu_count,
        "driver_version": facts.driver_version,
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def facts_from_value(value: object) -> dict[str, Any] | None:
    """The facts a plan row takes from a published value; None when it names no GPU (an
    unknown kind) or is not what a worker publishes."""
    if not isinstance(value, dict) or not value.get("gpu_name"):
        return None
    count = value.get("gpu_count")
    return {
        "gpu_name": str(value["gpu_name"]),
        "gpu_count": int(count) if isinstance(count, int | float) else None,
        "driver_version": value.get("driver_version"),
    }
