"""run_level against the fast stub: repeats, target CV, workers, OpenAI endpoints, HTTP framing."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from specsweep.config import LoadSpec
from specsweep.loadgen.client import stream_request
from specsweep.loadgen.http import Connection
from specsweep.loadgen.metrics import compute_level_metrics
from specsweep.loadgen.payloads import RequestFactory
from specsweep.loadgen.runner import WORKERS_ENV, LevelResult, resolve_workers, run_level
from specsweep.loadgen.workers import split_by_weight, split_evenly
from tests.unit.loadgen.stub_util import fast_stub


def level(load: LoadSpec, concurrency: int, **stub: Any) -> tuple[LevelResult, list[Any]]:
    progress: list[tuple[int, int]] = []

    async def body() -> LevelResult:
        async with fast_stub(**stub) as url:
            return await run_level(
                url, concurrency, load, on_progress=lambda d, t: progress.append((d, t))
            )

    return asyncio.run(body()), progress


def test_repeats_are_back_to_back_passes() -> None:
    load = LoadSpec(input_len=8, output_len=6, requests_per_level=5, repeats=3)
    result, progress = level(load, 2, tokens_per_chunk=(2,))
    assert [m.repeats for m in result.repeats] == [1, 1, 1]
    assert [r.repeat for r in result.records] == [0] * 5 + [1] * 5 + [2] * 5
    assert [r.index for r in result.records] == list(range(5)) * 3
    assert progress[-1] == (15, 15) and all(t == 15 for _, t in progress)
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)
    m = result.metrics
    assert (m.repeats, m.completed, m.output_tokens) == (3, 15, 90)
    assert math.isfinite(m.output_throughput_cv)
    assert m.output_throughput == pytest.approx(
        sum(p.output_throughput for p in result.repeats) / 3
    )
    assert m.accept_length == pytest.approx(2.0)
    assert m == compute_level_metrics(result.records, 2, load.max_error_rate)
    assert m.steady_window_s > 0 and m.steady_output_throughput > 0
    # perf_origin maps record times onto the wall clock of the level.
    first = result.started_at + timedelta(seconds=result.records[0].start - result.perf_origin)
    assert result.started_at <= first <= result.ended_at


def test_a_warm_in_spreads_the_streams_before_every_pass() -> None:
    """Four streams whose warm-in asks for 2, 4, 6 and 8 tokens (20 ms a chunk) enter
    each pass one after another, about 40 ms apart: the first pass and the second, whose
    warm-in follows the first's drain (a deterministic server's phases drift back into
    waves within a long loop: docs/metrics.md)."""
    load = LoadSpec(input_len=4, output_len=8, requests_per_level=8, repeats=2)
    result, _ = level(load, 4, itl_ms=20.0)
    for records in (result.records[:8], result.records[8:]):
        entries = sorted(r.start for r in records)[:4]
        assert all(b - a >= 0.02 for a, b in itertools.pairwise(entries)), entries
    assert min(r.start for r in result.records[8:]) > max(r.end for r in result.records[:8])
    together, _ = level(load.model_copy(update={"phases": "together"}), 4, itl_ms=20.0)
    entries = sorted(r.start for r in together.records[:8])[:4]
    assert entries[-1] - entries[0] < 0.02, entries  # all four warm-ins end in one wave


def test_target_cv_met_stops_at_two_passes() -> None:
    load = LoadSpec(input_len=4, output_len=4, requests_per_level=4, target_cv=10.0)
    result, progress = level(load, 2)
    assert result.metrics.repeats == 2
    assert progress[-1] == (8, 8)


def test_target_cv_missed_runs_max_repeats() -> None:
    load = LoadSpec(input_len=4, output_len=4, requests_per_level=4, target_cv=1e-12, max_repeats=3)
    result, _ = level(load, 2)
    assert result.metrics.repeats == 3 == len(result.repeats)


def test_a_target_ci_already_met_stops_after_one_pass() -> None:
    load = LoadSpec(input_len=4, output_len=4, requests_per_level=8, target_ci=0.9)
    # a paced stub: an unpaced level lasts ~5 ms, and a busy machine's jitter is its width;
    # its window (a pass read from the first tokens to the (N-C+1)-th end) is most of ~60 ms
    # at 5 ms a chunk (at 2 ms, ~25 ms: a loaded worker once read it ±90% wide)
    result, _ = level(load, 2, ttft_ms=5.0, itl_ms=5.0)
    assert result.metrics.repeats == 1
    assert result.metrics.target_ci_met is True
    assert result.metrics.output_throughput_ci.rel_halfwidth <= 0.9


def test_a_target_ci_out_of_reach_stops_at_max_requests_and_says_so() -> None:
    load = LoadSpec(
        input_len=4, output_len=4, requests_per_level=4, target_ci=1e-9, max_requests=12
    )
    result, progress = level(load, 2)
    assert result.metrics.repeats == 3  # 3 passes of 4 requests: the cap of 12
    assert result.metrics.completed == 12
    assert result.metrics.target_ci_met is False
    assert progress[-1] == (12, 12)


def test_a_target_ci_out_of_reach_starts_no_pass_after_max_level_s() -> None:
    load = LoadSpec(
        input_len=4, output_len=4, requests_per_level=4, target_ci=1e-9, max_level_s=1e-6
    )
    result, _ = level(load, 2)
    assert result.metrics.repeats == 1
    assert result.metrics.target_ci_met is False


def test_fixed_counts_record_no_target() -> None:
    result, _ = level(LoadSpec(input_len=4, output_len=4, requests_per_level=4), 2)
    assert result.metrics.target_ci_met is None


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("continuous", [True, False])
def test_openai_endpoints(endpoint: str, continuous: bool) -> None:
    load = LoadSpec(endpoint=endpoint, input_len=10, output_len=9, requests_per_level=3)
    result, _ = level(load, 2, tokens_per_chunk=(3,), continuous_usage=continuous)
    m = result.metrics
    assert (m.completed, m.failed, m.output_tokens) == (3, 0, 27)
    assert m.input_tokens == 30  # the stub counts words; the server's count wins
    for r in result.records:
        assert (r.output_tokens, r.finish_reason) == (9, "length")
        # Exact tokens per chunk with per-chunk usage. Without it the three chunks do not
        # add up to the final usage (9): tokens per chunk are unknown, not one each.
        assert r.chunk_tokens_known is continuous
        assert len(r.itls) == (6 if continuous else 0)
    assert m.chunk_tokens_unknown == (0 if continuous else 3)
    assert math.isnan(m.itl_ms_p50) is not continuous  # no per-token ITL from 1-token guesses


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_stream_without_usage_per_chunk_that_adds_up_is_exact(endpoint: str) -> None:
    """One token per chunk: the chunk count equals the final usage, so each chunk is known
    to carry exactly one token (every chunk carries at least one)."""
    load = LoadSpec(endpoint=endpoint, input_len=10, output_len=9, requests_per_level=3)
    result, _ = level(load, 2, tokens_per_chunk=(1,), continuous_usage=False)
    assert all(r.chunk_tokens_known and r.chunk_tokens == (1,) * 9 for r in result.records)
    assert result.metrics.chunk_tokens_unknown == 0
    assert all(len(r.itls) == 8 for r in result.records)


def test_workers_split_the_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "2")
    assert resolve_workers(None) == 2
    assert resolve_workers(3) == 3
    load = LoadSpec(input_len=4, output_len=5, requests_per_level=9, repeats=2)
    result, progress = level(load, 3)
    assert [r.index for r in result.records] == list(range(9)) * 2
    assert all(r.ok for r in result.records)
    assert result.metrics.output_tokens == 90
    assert result.metrics.achieved_concurrency <= 3 + 1e-6
    assert progress[-1] == (18, 18)
    monkeypatch.setenv(WORKERS_ENV, "zero")
    with pytest.raises(ValueError, match=WORKERS_ENV):
        resolve_workers(None)


async def raw_server(respond: Callable[[asyncio.StreamWriter], Awaitable[bool]]) -> Any:
    """A server that answers every request with `respond` (False: close afterwards)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                if not await respond(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


SSE = (
    b'data: {"text":"a","meta_info":{"completion_tokens":1,"finish_reason":null}}\n\n'
    b'data: {"text":"ab","meta_info":{"completion_tokens":2,'
    b'"finish_reason":{"type":"length","length":2},"prompt_tokens":3}}\n\ndata: [DONE]\n\n'
)


@pytest.mark.parametrize("framing", ["length", "close", "stale"])
def test_http_framings(framing: str) -> None:
    """Content-Length bodies, bodies ended by close, and keep-alive that silently ends."""

    async def respond(writer: asyncio.StreamWriter) -> bool:
        if framing == "close":  # HTTP/1.0 style: no length, the end of the body is EOF
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + SSE)
            return False
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE))
        await writer.drain()
        return framing != "stale"  # stale: close the idle connection behind the client

    async def body() -> list[Any]:
        server = await raw_server(respond)
        port = server.sockets[0].getsockname()[1]
        factory = RequestFactory(f"http://127.0.0.1:{port}", 1, LoadSpec(output_len=2))
        conn = Connection("127.0.0.1", port)
        records = []
        for i in range(3):
            records.append(await stream_request(conn, factory.prepare([1, 2, 3]), i, 5.0))
            await asyncio.sleep(0.05)  # let a stale connection's FIN arrive (or not)
        conn.close()
        server.close()
        return records

    for r in asyncio.run(body()):
        assert r.ok, r.error
        assert (r.output_tokens, r.chunk_tokens, r.prompt_tokens) == (2, (1, 1), 3)


def test_reused_connection_closed_under_a_request_is_retried_once() -> None:
    """The keep-alive race: the server drops a reused connection as a request goes out."""
    served: list[int] = []

    async def respond(writer: asyncio.StreamWriter) -> bool:
        served.append(len(served))
        if len(served) == 2:  # the second request, on the connection the first one used
            return False  # close without a byte of response
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE))
        await writer.drain()
        return True

    async def body() -> list[Any]:
        server = await raw_server(respond)
        port = server.sockets[0].getsockname()[1]
        factory = RequestFactory(f"http://127.0.0.1:{port}", 1, LoadSpec(output_len=2))
        conn = Connection("127.0.0.1", port)
        records = [await stream_request(conn, factory.prepare([1]), i, 5.0) for i in range(2)]
        conn.close()
        server.close()
        return records

    records = asyncio.run(body())
    assert all(r.ok for r in records), [r.error for r in records]
    assert len(served) == 3


def test_splits() -> None:
    assert split_evenly(10, 3) == [4, 3, 3]
    assert split_evenly(2, 3) == [1, 1, 0]
    assert split_by_weight(10, [4, 3, 3]) == [4, 3, 3]
    assert split_by_weight(7, [2, 1]) == [5, 2]
    assert sum(split_by_weight(1001, [3, 3, 2])) == 1001
