"""Wall time per lifecycle phase, summed over retries: what the runs table reports.

A variant's phase record (one per run, variant and target, results/store.py) keeps, beside
the seconds per phase, how long its servers held the target's GPUs: `held_from_unix` and
`held_until_unix` bound the latest hold (one launch, with its start attempts);
`held_before_s` is every earlier hold in the same run (a retried task, a search killed
and resumed) and `holds` counts them all, so a relaunch adds to what the run paid
instead of overwriting it. `alive_unix`, the
end of the latest level written, bounds a hold whose process was killed before it could
say when it ended.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

HOLD_KEYS = ("held_from_unix", "held_until_unix", "held_before_s", "alive_unix", "holds")
MEMORY_KEYS = ("gpu_mib_at_start", "gpu_mib_after_teardown")


class Phases:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Counts the phase's time even when it raises (a crash still took that long)."""
        start = time.monotonic()
        try:
            yield
        finally:
            elapsed = time.monotonic() - start
            self.seconds[name] = round(self.seconds.get(name, 0.0) + elapsed, 3)


def held_seconds(record: Mapping[str, float], now: float | None = None) -> float:
    """Seconds a variant's servers held the target in the run, every launch of it.

    The latest hold ends at `held_until_unix`; without one (still up, or its process was
    killed) at `now` where the caller knows the server is up, else at `alive_unix` (the
    last level it wrote), else it counts nothing beyond its start."""
    start = record.get("held_from_unix")
    earlier = float(record.get("held_before_s", 0.0))
    if start is None:
        return earlier
    end = record.get("held_until_unix")
    if end is None:
        end = now if now is not None else record.get("alive_unix", start)
    return earlier + max(0.0, float(end) - float(start))


def carried_over(earlier: Mapping[str, float] | None) -> tuple[dict[str, float], dict[str, float]]:
    """What a relaunch of a variant keeps from its earlier launches in the same run: (their
    phase seconds, to add to; their hold and memory keys, to write beside the new hold).
    The first GPU memory reading stays the first one."""
    if not earlier:
        return {}, {"holds": 1.0}
    seconds = {
        k: float(v) for k, v in earlier.items() if k not in HOLD_KEYS and k not in MEMORY_KEYS
    }
    held = {
        "held_before_s": round(held_seconds(earlier), 3),
        "holds": float(earlier.get("holds", 1.0)) + 1.0,
    }
    if "gpu_mib_at_start" in earlier:
        held["gpu_mib_at_start"] = float(earlier["gpu_mib_at_start"])
    return seconds, held


def gpu_memory_lines(phase_files: list[tuple[str, str | None, dict[str, float]]]) -> list[str]:
    """Per target, a sentence: the GPUs' used memory when the sweep's first variant began
    (before its kill-stale step) and after its last teardown; nothing where no GPU was
    checked.

    ``phase_files``: ``ResultsStore.read_phase_files(run_id)``.
    """
    by_target: dict[str, list[dict[str, float]]] = {}
    for _, target, phases in phase_files:
        by_target.setdefault(target or "?", []).append(phases)
    lines = []
    for target, runs in sorted(by_target.items()):
        runs.sort(key=lambda p: p.get("held_from_unix", 0.0))
        before = next((p["gpu_mib_at_start"] for p in runs if "gpu_mib_at_start" in p), None)
        after = next(
            (p["gpu_mib_after_teardown"] for p in reversed(runs) if "gpu_mib_after_teardown" in p),
            None,
        )
        if before is None and after is None:
            continue

        def mib(v: float | None) -> str:
            return "not checked" if v is None else f"{v:,.0f} MiB"

        lines.append(
            f"GPU memory on {target}: {mib(before)} in use before the sweep, "
            f"{mib(after)} after its last teardown."
        )
    return lines
