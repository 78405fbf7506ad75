"""Closed-loop load at one concurrency level: a warm-in, then one or more measured passes.

Closed loop means C streams each send a request, wait for it to finish, and
send the next: the server sees exactly C streams in flight (apart from the
short gaps between requests), which is the regime where speculative decoding's
benefit shrinks as batches grow. Streams pull from one shared queue, so no more
than C requests are ever in flight and exactly N are sent per pass.

Each of the ``load.repeats`` passes follows a warm-in of its own in one queue
(streams.Segment): no stream waits for the others between the two. The warm-in's
requests ask for 1/C .. C/C of the output length (payloads.stagger), so the
streams enter the pass at phases spread over a request, as users' requests
arrive; a pass is read over its window, where C requests are in flight
(metrics.py). Started together, every stream's first request would end in one
wave, which a deterministic server keeps for good and a speculative one for many
requests. Spread phases are not for good either on a deterministic server: two of
its requests whose replacements reach it in one step end together from then on,
and its passes drift towards the waves (the simulated 8B baseline at c=32: +5%
over 8 passes in one loop), so every pass starts from a warm-in of its own
(docs/metrics.md). Each pass has fresh prompts, so none is served from the prefix
cache of another. With ``load.target_cv`` passes are added until the output
throughput's coefficient of variation is at most the target, or ``load.max_repeats``
is hit; with ``load.target_ci`` until the 95% interval of the output throughput
(pooled over the passes, specsweep/results/intervals.py) is within the target, or the
next pass would pass ``load.max_requests`` or start after ``load.max_level_s``.

With ``workers`` > 1 the C streams are split over that many processes, each
with its own event loop and its own share of the warm-in and of each pass: the
closed loop is then per process (a process whose share ran out does not take over
another one's queue), which only shortens the window at the very end of a pass.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from time import perf_counter
from typing import Any, TypeVar

from specsweep.config import LoadSpec
from specsweep.loadgen.limits import ensure_open_files, files_for
from specsweep.loadgen.metrics import (
    NAN,
    LevelMetrics,
    RequestRecord,
    combine_passes,
    compute_pass_metrics,
    split_passes,
    throughput_cv,
)
from specsweep.loadgen.payloads import RequestFactory, discover_model
from specsweep.loadgen.streams import (
    WARMUP,
    LocalRunner,
    PassRunner,
    Segment,
    gc_paused,
    new_event_loop,
)
from specsweep.results.drift import Drift
from specsweep.results.intervals import throughput_intervals

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]
WORKERS_ENV = "SPECSWEEP_LOADGEN_WORKERS"
T = TypeVar("T")


@dataclass(frozen=True)
class LevelResult:
    """The measured requests of one level, their summary and when they ran.

    ``perf_origin`` is the ``time.perf_counter()`` reading taken at
    ``started_at``: a record's time t happened at ``started_at + (t -
    perf_origin)`` seconds (same host; both clocks are the monotonic one).
    """

    metrics: LevelMetrics
    records: tuple[RequestRecord, ...]
    started_at: datetime
    ended_at: datetime
    repeats: tuple[LevelMetrics, ...] = ()
    perf_origin: float = NAN


def resolve_workers(workers: int | None) -> int:
    """The argument, else $SPECSWEEP_LOADGEN_WORKERS, else 1 process."""
    if workers is None:
        raw = os.environ.get(WORKERS_ENV, "").strip()
        try:
            workers = int(raw) if raw else 1
        except ValueError:
            raise ValueError(f"{WORKERS_ENV} must be a whole number, got {raw!r}") from None
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return workers


def _more_passes(
    passes: Sequence[LevelMetrics],
    records: Sequence[RequestRecord],
    load: LoadSpec,
    concurrency: int,
    elapsed_s: float,
    drift: Drift | None = None,
) -> bool:
    """Whether target_cv or target_ci asks for another pass after these."""
    if load.target_ci is not None:
        if _ci_met(records, load, concurrency, drift) is not False:
            return False
        more = (len(passes) + 1) * load.num_requests(concurrency)
        return elapsed_s < load.max_level_s and more <= load.max_requests_at(concurrency)
    if load.target_cv is None or len(passes) >= load.max_repeats:
        return False
    if len(passes) < 2:
        return True
    cv = throughput_cv(passes)
    return math.isfinite(cv) and cv > load.target_cv


def _ci_met(
    records: Sequence[RequestRecord], load: LoadSpec, concurrency: int, drift: Drift | None
) -> bool | None:
    """Whether the pooled interval of output throughput is within load.target_ci."""
    if load.target_ci is None:
        return None
    out, _ = throughput_intervals(split_passes(records), concurrency, drift)
    half = out.rel_halfwidth
    return bool(math.isfinite(half) and half <= load.target_ci)


async def run_level(
    base_url: str,
    concurrency: int,
    load: LoadSpec,
    *,
    on_progress: ProgressCallback | None = None,
    workers: int | None = None,
    drift: Drift | None = None,
) -> LevelResult:
    """Warm up, then measure `load.num_requests(concurrency)` requests per pass.

    ``drift``: the run's measured drift on this target, for the throughput intervals
    (None: the assumed floor; specsweep/results/intervals.py)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if raised := ensure_open_files(files_for(concurrency)):  # here too: on an SSH target
        logger.info("%s", raised)
    n_workers = min(resolve_workers(workers), concurrency)
    model = await discover_model(base_url) if load.resolved_endpoint() != "generate" else None
    factory = RequestFactory(base_url, concurrency, load, model)
    runner: PassRunner
    if n_workers > 1:
        from specsweep.loadgen.workers import ProcessRunner

        runner = await ProcessRunner.start(base_url, concurrency, load.request_timeout_s, n_workers)
    else:
        runner = LocalRunner(base_url, concurrency, load.request_timeout_s)
    n_requests = load.num_requests(concurrency)
    passes: list[LevelMetrics] = []
    records: list[RequestRecord] = []
    asked: dict[tuple[int, int], int] = {}  # (pass, index) -> output tokens asked for
    planned = load.repeats

    def segments(repeat: int) -> list[Segment]:
        """A warm-in, then pass ``repeat``: one closed loop."""
        requests = factory.measured(repeat)
        for i, request in enumerate(requests):
            asked[repeat, i] = request.output_len or load.output_len
        return [Segment(WARMUP, factory.warmup()), Segment(repeat, requests)]

    try:
        with gc_paused():
            perf_origin = perf_counter()
            started_at = datetime.now(UTC)
            todo = segments(0)
            while todo:

                def progress(done: int, before: int = len(records), total: int = planned) -> None:
                    if on_progress is not None:  # counts over all passes planned so far
                        on_progress(before + done, total * n_requests)

                got = await runner.run(todo, progress)
                gc.collect()  # between closed loops, where no clock is running
                _warn_warmup(concurrency, [r for r in got if r.repeat == WARMUP])
                measured = [r for r in got if r.repeat != WARMUP]
                records.extend(measured)
                # passes do not overlap in time (each drains before the next warm-in), so
                # a pass's window holds its own tokens only: its metrics are final now
                passes.append(
                    compute_pass_metrics(measured, concurrency, load.max_error_rate, drift)
                )
                elapsed = perf_counter() - perf_origin
                todo = []
                if len(passes) < planned:
                    todo = segments(len(passes))
                elif _more_passes(passes, records, load, concurrency, elapsed, drift):
                    planned += 1
                    todo = segments(len(passes))
            ended_at = datetime.now(UTC)
    finally:
        await runner.aclose()

    metrics = combine_passes(passes, records, concurrency, load.max_error_rate, drift)
    metrics = replace(metrics, target_ci_met=_ci_met(records, load, concurrency, drift))
    _log_level(concurrency, load, metrics, records, asked)
    return LevelResult(
        metrics=metrics,
        records=tuple(records),
        started_at=started_at,
        ended_at=ended_at,
        repeats=tuple(passes),
        perf_origin=perf_origin,
    )


def _warn_warmup(concurrency: int, warm: Sequence[RequestRecord]) -> None:
    bad = [r for r in warm if not r.ok]
    if bad:
        logger.warning(
            "c=%d: %d of %d warmup requests failed (first: %s)",
            concurrency,
            len(bad),
            len(warm),
            bad[0].error,
        )


def _log_level(
    concurrency: int,
    load: LoadSpec,
    metrics: LevelMetrics,
    records: Sequence[RequestRecord],
    asked: dict[tuple[int, int], int],
) -> None:
    """Warnings about the level (short outputs, targets missed) and its summary line.

    ``asked``: the output tokens each request asked for, by (pass, index): a replay
    asks each for its recorded length, every other load for ``load.output_len``.
    """
    short = [
        r
        for r in records
        if r.ok and r.output_tokens < asked.get((r.repeat, r.index), load.output_len)
    ]
    if short:
        lengths = set(asked.values()) or {load.output_len}
        logger.warning(
            "c=%d: %d requests returned fewer tokens than they asked for (%s; finish "
            "reasons: %s); they are kept, but the level did not run at the intended length",
            concurrency,
            len(short),
            f"{lengths.pop()} tokens" if len(lengths) == 1 else "each its own output length",
            sorted({str(r.finish_reason) for r in short}),
        )
    if metrics.target_ci_met is False:
        logger.warning(
            "c=%d: output throughput ±%.1f%% after %d requests in %d passes: the target "
            "±%.1f%% was not reached within max_level_s / max_requests",
            concurrency,
            100 * metrics.output_throughput_ci.rel_halfwidth,
            metrics.completed + metrics.failed,
            metrics.repeats,
            100 * (load.target_ci or 0.0),
        )
    cv = metrics.output_throughput_cv
    if load.target_cv is not None and not (math.isfinite(cv) and cv <= load.target_cv):
        logger.warning(
            "c=%d: output throughput CV %.3f after %d passes is above the target %.3f",
            concurrency,
            cv,
            metrics.repeats,
            load.target_cv,
        )
    logger.info(
        "c=%d: %d ok, %d failed, %.1f output tok/s (steady %.1f), %d pass(es), status %s",
        concurrency,
        metrics.completed,
        metrics.failed,
        metrics.output_throughput,
        metrics.steady_output_throughput,
        metrics.repeats,
        metrics.status,
    )


def run_level_sync(
    base_url: str,
    concurrency: int,
    load: LoadSpec,
    *,
    on_progress: ProgressCallback | None = None,
    workers: int | None = None,
    drift: Drift | None = None,
) -> LevelResult:
    """`run_level` for synchronous callers (Prefect tasks) that have no running loop."""
    return run_on_new_loop(
        run_level(
            base_url, concurrency, load, on_progress=on_progress, workers=workers, drift=drift
        )
    )


def run_on_new_loop(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on a fresh (uv)loop, without asyncio.Runner's repr of the result.

    In the main thread, Python 3.11's Runner.run ends by formatting its SIGINT
    handler, whose repr includes the main task and so the repr of its result:
    seconds of CPU for a level's worth of records. The task returns None here.
    """
    box: list[T] = []

    async def main() -> None:
        box.append(await coro)

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        with _signal_exceptions_escape(runner.get_loop()) as caught:
            try:
                runner.run(main())
            except asyncio.CancelledError:
                if not caught:
                    raise
        if caught:  # e.g. Prefect's TerminationSignal: the run was cancelled
            raise caught[0]
    return box[0]


@contextmanager
def _signal_exceptions_escape(loop: asyncio.AbstractEventLoop) -> Iterator[list[BaseException]]:
    """Let an exception raised by a signal handler stop the level and reach the caller.

    A Python signal handler that raises (Prefect's SIGTERM bridge, when a run is
    cancelled) fires inside the event loop's callbacks, where asyncio and uvloop hand
    any exception but SystemExit and KeyboardInterrupt to the exception handler, which
    logs it and carries on: the level would run to its end and the worker would have
    to SIGKILL the process, skipping every cleanup. Here such an exception cancels the
    level and is raised again once the loop has stopped. The caller's handler stays
    installed (Prefect acknowledges a cancellation only while its own handler is).
    """
    caught: list[BaseException] = []
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, BaseException) and not isinstance(
            exc, Exception | asyncio.CancelledError
        ):
            if not caught:
                caught.append(exc)
                for task in asyncio.all_tasks(loop):
                    task.cancel()
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield caught
    finally:
        loop.set_exception_handler(previous)
