"""Wall time per lifecycle phase, summed over retries: what the runs table reports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


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
