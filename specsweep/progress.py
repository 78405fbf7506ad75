"""Where level progress goes: one process-wide sink, set by whoever shows it.

The engine reports (variant, concurrency, done, total); the CLI shows a rich
progress bar and a Prefect task updates a progress artifact, without the
engine knowing about either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

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


class OffTheLoop:
    """Calls fn(done, total) from a thread of its own, with the latest value only.

    Level progress is reported from inside the measuring event loop (the load generator
    calls back after each request). A sink that blocks (a Prefect API call takes 10-40 ms)
    would stall every stream meanwhile and bias the level: here the caller only stores the
    value; the thread delivers the newest one when it is free, and the last value is
    always delivered before the context exits.
    """

    def __init__(self, fn: Callable[[int, int], None]) -> None:
        self._fn = fn
        self._latest: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            self._latest = (done, total)
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                value, self._latest = self._latest, None
            if value is not None:
                try:
                    self._fn(*value)
                except Exception as exc:  # progress must never fail a measurement
                    log.warning("level progress could not be reported: %s", exc)
            if self._stop:
                with self._lock:
                    if self._latest is None:
                        return

    def __enter__(self) -> OffTheLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=30)
