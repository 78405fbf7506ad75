"""Where level progress goes: one process-wide sink, set by whoever shows it.

The engine reports (variant, concurrency, done, total); the CLI shows a rich
progress bar and a Prefect task updates a progress artifact, without the
engine knowing about either.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ProgressSink = Callable[[str, int, int, int], None]

_sinks: list[ProgressSink] = []


@contextmanager
def progress_sink(sink: ProgressSink) -> Iterator[None]:
    """Send every level's progress to sink while the block runs."""
    _sinks.append(sink)
    try:
        yield
    finally:
        _sinks.remove(sink)


def reporter(variant: str, concurrency: int) -> Callable[[int, int], None]:
    """The on_progress callback for one level, fanning out to the active sinks."""

    def report(done: int, total: int) -> None:
        for sink in list(_sinks):
            sink(variant, concurrency, done, total)

    return report


def throttled(fn: Callable[[int, int], None], min_interval_s: float) -> Callable[[int, int], None]:
    """Call fn at most every min_interval_s, but always for the first and final update."""
    last = [float("-inf")]

    def call(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= min_interval_s:
            last[0] = now
            fn(done, total)

    return call
