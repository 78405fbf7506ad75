"""C streams of requests on one event loop: the unit both the in-process runner and
each worker process (loadgen/workers.py) measure with."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from specsweep.loadgen.client import PreparedRequest, stream_request
from specsweep.loadgen.http import Connection, split_url
from specsweep.loadgen.metrics import RequestRecord


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed: its transports cost about half of asyncio's per read."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while measuring.

    A full collection in a process with many objects (a Prefect worker, pytest)
    takes 20-35 ms: every stream whose request ended meanwhile starts its next
    one that much late, and without kernel arrival stamps every chunk that
    came in is stamped late. Request garbage is almost all freed by reference
    counting, so the collector is paused (process-wide) for the level, with
    the objects that exist before it frozen out of later collections, and run
    between passes.

    Only the young generations are collected before the freeze: a full collection
    walks the whole heap, which in a long-lived process (a pytest worker late in the
    suite) took about 0.2 s per level; what the oldest generation holds of garbage
    stays frozen for the level and is collected after it, as it would have been.
    """
    enabled = gc.isenabled()
    gc.collect(1)
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


WARMUP = -1  # the ``repeat`` of a warm-in request: sent to set the streams' phases, not kept


@dataclass(frozen=True, slots=True)
class Segment:
    """Requests of one pass (``repeat`` >= 0) or of the warm-in (``WARMUP``), in order."""

    repeat: int
    requests: Sequence[PreparedRequest]
    index_offset: int = 0  # the first request's index within its pass


async def closed_loop(
    conns: Sequence[Connection],
    segments: Sequence[Segment],
    timeout_s: float,
    on_done: Callable[[int], None] | None = None,
) -> list[RequestRecord]:
    """Send every segment's requests, in order, with one stream per connection.

    The segments form one queue: a stream that finishes a request takes the next one,
    whichever segment it belongs to, so no stream waits for the others between the
    warm-in and a pass or between two passes (the server keeps C requests in flight
    until the queue runs dry). Records in queue order, each with its segment's repeat;
    ``on_done`` counts the measured requests (not the warm-in's) as they finish.
    """
    queue = [
        (seg.repeat, seg.index_offset + i, r)
        for seg in segments
        for i, r in enumerate(seg.requests)
    ]
    total = len(queue)
    records: list[RequestRecord | None] = [None] * total
    next_index = 0
    finished = 0

    async def stream(conn: Connection) -> None:
        nonlocal next_index, finished
        while next_index < total:
            i = next_index  # no await between read and increment: atomic in asyncio
            next_index += 1
            repeat, index, request = queue[i]
            records[i] = await stream_request(conn, request, index, timeout_s, repeat)
            if repeat != WARMUP:
                finished += 1
                if on_done is not None:
                    on_done(finished)

    async with asyncio.TaskGroup() as group:
        for conn in conns[: min(len(conns), total)]:
            group.create_task(stream(conn))
    return [r for r in records if r is not None]


class PassRunner(Protocol):
    """Runs segments (a warm-in and passes) as one closed loop at the level's concurrency."""

    async def run(
        self, segments: Sequence[Segment], on_done: Callable[[int], None] | None = None
    ) -> list[RequestRecord]: ...

    async def aclose(self) -> None: ...


class LocalRunner:
    """All C streams on the running event loop, one keep-alive connection each."""

    def __init__(self, base_url: str, concurrency: int, timeout_s: float) -> None:
        host, port, _ = split_url(base_url)
        self.conns = [Connection(host, port) for _ in range(concurrency)]
        self.timeout_s = timeout_s

    async def run(
        self, segments: Sequence[Segment], on_done: Callable[[int], None] | None = None
    ) -> list[RequestRecord]:
        return await closed_loop(self.conns, segments, self.timeout_s, on_done)

    async def aclose(self) -> None:
        for conn in self.conns:
            conn.close()
