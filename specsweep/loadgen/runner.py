"""Closed-loop load at one concurrency level: warmup, then the measured requests.

Closed loop means c workers each send a request, wait for it to finish, and
send the next: the server sees exactly c streams in flight (apart from the
short gaps between requests), which is the regime where speculative decoding's
benefit shrinks as batches grow. Workers pull indices from a shared counter, so
no more than c requests are ever in flight and exactly N are sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp

from specsweep.config import LoadSpec
from specsweep.loadgen.client import stream_generate
from specsweep.loadgen.metrics import LevelMetrics, RequestRecord, compute_level_metrics
from specsweep.loadgen.prompts import level_seed, make_input_ids

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]

# Each SSE line carries the cumulative text, so it grows with output length;
# aiohttp refuses lines longer than 2 * read_bufsize.
_READ_BUFSIZE = 4 * 1024 * 1024


@dataclass(frozen=True)
class LevelResult:
    """The measured requests of one level, their summary and when they ran."""

    metrics: LevelMetrics
    records: tuple[RequestRecord, ...]
    started_at: datetime
    ended_at: datetime


def _make_session() -> aiohttp.ClientSession:
    """One keep-alive pool per level, never routed through a proxy."""
    connector = aiohttp.TCPConnector(
        limit=0,  # the workers bound concurrency; a pool limit would only queue silently
        limit_per_host=0,
        force_close=False,
        ttl_dns_cache=300,
        keepalive_timeout=60,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),  # per-request timeouts are set by the client
        trust_env=False,
        read_bufsize=_READ_BUFSIZE,
    )


async def _run_closed_loop(
    session: aiohttp.ClientSession,
    base_url: str,
    prompts: Sequence[list[int]],
    concurrency: int,
    load: LoadSpec,
    on_done: Callable[[int], None] | None = None,
) -> list[RequestRecord]:
    """Send every prompt with at most `concurrency` in flight; records in issue order."""
    total = len(prompts)
    records: list[RequestRecord | None] = [None] * total
    next_index = 0
    finished = 0

    async def worker() -> None:
        nonlocal next_index, finished
        while next_index < total:
            i = next_index  # no await between read and increment: atomic in asyncio
            next_index += 1
            records[i] = await stream_generate(
                session, base_url, prompts[i], load.output_len, i, load.request_timeout_s
            )
            finished += 1
            if on_done is not None:
                on_done(finished)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, total)):
            group.create_task(worker())
    return [r for r in records if r is not None]


async def run_level(
    base_url: str,
    concurrency: int,
    load: LoadSpec,
    *,
    on_progress: ProgressCallback | None = None,
) -> LevelResult:
    """Warm up, then measure `load.num_requests(concurrency)` requests at `concurrency`."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    n_requests = load.num_requests(concurrency)
    n_warmup = load.num_warmup(concurrency)
    prompts = make_input_ids(n_requests, load.input_len, level_seed(load.seed, concurrency))
    warmup_prompts = make_input_ids(
        n_warmup, load.input_len, level_seed(load.seed, concurrency, warmup=True)
    )

    async with _make_session() as session:
        if warmup_prompts:
            warm = await _run_closed_loop(session, base_url, warmup_prompts, concurrency, load)
            bad = [r for r in warm if not r.ok]
            if bad:
                logger.warning(
                    "c=%d: %d of %d warmup requests failed (first: %s)",
                    concurrency,
                    len(bad),
                    len(warm),
                    bad[0].error,
                )

        def progress(done: int) -> None:
            if on_progress is not None:
                on_progress(done, n_requests)

        started_at = datetime.now(UTC)
        records = await _run_closed_loop(
            session, base_url, prompts, concurrency, load, on_done=progress
        )
        ended_at = datetime.now(UTC)

    metrics = compute_level_metrics(records, concurrency, load.max_error_rate)
    short = [r for r in records if r.ok and r.output_tokens < load.output_len]
    if short:
        logger.warning(
            "c=%d: %d requests returned fewer than %d tokens (finish reasons: %s); "
            "they are kept, but the level did not run at the intended length",
            concurrency,
            len(short),
            load.output_len,
            sorted({str(r.finish_reason) for r in short}),
        )
    logger.info(
        "c=%d: %d ok, %d failed, %.1f output tok/s, status %s",
        concurrency,
        metrics.completed,
        metrics.failed,
        metrics.output_throughput,
        metrics.status,
    )
    return LevelResult(
        metrics=metrics, records=tuple(records), started_at=started_at, ended_at=ended_at
    )


def run_level_sync(
    base_url: str,
    concurrency: int,
    load: LoadSpec,
    *,
    on_progress: ProgressCallback | None = None,
) -> LevelResult:
    """`run_level` for synchronous callers (Prefect tasks) that have no running loop."""
    return asyncio.run(run_level(base_url, concurrency, load, on_progress=on_progress))
