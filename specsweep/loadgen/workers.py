"""Several load-generator processes for one level, when one event loop is not enough.

Each process runs its share of the C streams on its own (uv)loop and returns
its records; the parent merges them. Processes are spawned, not forked: the
caller may be a Prefect worker with threads, and forking a threaded process is
unsafe. Records carry ``perf_counter`` times, which on Linux is the host-wide
monotonic clock, so records of different processes share one time line.

The parent hands each process its share of every segment (the warm-in, then the
passes), already encoded, and all processes start within about a millisecond of
one another; each runs its shares as one closed loop of its own streams. A
process reports progress at most every 50 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing as mp
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection as Pipe
from multiprocessing.process import BaseProcess
from time import monotonic
from typing import Any

from specsweep.loadgen.metrics import RequestRecord
from specsweep.loadgen.streams import WARMUP, LocalRunner, Segment, gc_paused, new_event_loop

_PROGRESS_EVERY_S = 0.05
_JOIN_TIMEOUT_S = 5.0


def split_evenly(total: int, parts: int) -> list[int]:
    """total split into `parts` whole shares differing by at most one, larger first."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def split_by_weight(total: int, weights: Sequence[int]) -> list[int]:
    """total split in proportion to weights (largest remainder), summing exactly to total."""
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _child_main(pipe: Pipe, base_url: str, streams: int, timeout_s: float) -> None:
    """A worker process: run passes as the parent sends them, until it sends None."""

    async def run_pass(segments: list[Segment]) -> None:
        last = float("-inf")  # the first update goes out whatever the clock reads
        total = sum(len(s.requests) for s in segments if s.repeat != WARMUP)

        def on_done(done: int) -> None:
            nonlocal last
            now = monotonic()
            if done == total or now - last >= _PROGRESS_EVERY_S:
                last = now
                pipe.send(("progress", done))

        records = await runner.run(segments, on_done)
        pipe.send(("records", records))  # (not the task's result: see run_on_new_loop)

    runner = LocalRunner(base_url, streams, timeout_s)
    with asyncio.Runner(loop_factory=new_event_loop) as loop, gc_paused():
        while (msg := pipe.recv()) is not None:
            loop.run(run_pass(msg))
            gc.collect()  # between passes, where no clock is running
        loop.run(runner.aclose())


class ProcessRunner:
    """A PassRunner whose streams live in several spawned processes."""

    def __init__(self, procs: list[BaseProcess], pipes: list[Pipe], shares: list[int]) -> None:
        self.procs, self.pipes, self.shares = procs, pipes, shares

    @classmethod
    async def start(
        cls, base_url: str, concurrency: int, timeout_s: float, workers: int
    ) -> ProcessRunner:
        shares = [s for s in split_evenly(concurrency, workers) if s > 0]
        ctx = mp.get_context("spawn")
        procs: list[BaseProcess] = []
        pipes: list[Pipe] = []
        for i, share in enumerate(shares):
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(
                target=_child_main,
                args=(child_end, base_url, share, timeout_s),
                name=f"specsweep-loadgen-{i}",
                daemon=True,
            )
            proc.start()
            child_end.close()
            procs.append(proc)
            pipes.append(parent_end)
        return cls(procs, pipes, shares)

    async def _collect(self, i: int, on_progress: Callable[[int, int], None]) -> Any:
        while True:
            try:
                kind, payload = await asyncio.to_thread(self.pipes[i].recv)
            except EOFError:
                self.procs[i].join(1.0)
                raise RuntimeError(
                    f"load generator process {i} died (exit code {self.procs[i].exitcode})"
                ) from None
            if kind == "records":
                return payload
            on_progress(i, payload)

    async def run(
        self, segments: Sequence[Segment], on_done: Callable[[int], None] | None = None
    ) -> list[RequestRecord]:
        """Each process gets its share of every segment, by weight of its streams: the
        warm-in's too, so every process's streams start at phases spread as the whole's."""
        shares: list[list[Segment]] = [[] for _ in self.shares]
        for seg in segments:
            offset = 0
            for mine, count in zip(
                shares, split_by_weight(len(seg.requests), self.shares), strict=True
            ):
                part = list(seg.requests[offset : offset + count])
                mine.append(Segment(seg.repeat, part, seg.index_offset + offset))
                offset += count
        done = [0] * len(shares)

        def progress(i: int, n: int) -> None:
            done[i] = n
            if on_done is not None:
                on_done(sum(done))

        for pipe, mine in zip(self.pipes, shares, strict=True):
            pipe.send(mine)
        parts = await asyncio.gather(*(self._collect(i, progress) for i in range(len(shares))))
        return sorted((r for part in parts for r in part), key=lambda r: (r.repeat, r.index))

    async def aclose(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):  # that process is gone already
                pipe.send(None)
        for proc in self.procs:
            await asyncio.to_thread(proc.join, _JOIN_TIMEOUT_S)
            if proc.is_alive():
                proc.terminate()
                proc.join(1.0)
        for pipe in self.pipes:
            pipe.close()
