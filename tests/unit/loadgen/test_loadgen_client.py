"""stream_request and run_level against a tiny sglang-like SSE stub (aiohttp) on loopback.

The stub picks its behaviour from the first path segment, so one server covers
every scenario: POST /{scenario}/generate.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from specsweep.config import LoadSpec
from specsweep.loadgen.client import (
    GenerateDecoder,
    OpenAIDecoder,
    ServerError,
    parse_meta,
    stream_request,
)
from specsweep.loadgen.http import Connection, clock_offset_ns
from specsweep.loadgen.metrics import RequestRecord
from specsweep.loadgen.payloads import RequestFactory
from specsweep.loadgen.prompts import level_seed, make_input_ids
from specsweep.loadgen.runner import run_level, run_level_sync


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(prompt: int, total: int, finish: Any = None, **extra: Any) -> bytes:
    meta = {"prompt_tokens": prompt, "completion_tokens": total, "finish_reason": finish}
    return sse({"text": "tok " * total, "meta_info": {**meta, **extra}})


class Stub:
    """Counts requests and how many are in flight at once."""

    def __init__(self) -> None:
        self.received: list[list[int]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/{scenario}/generate", self.handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        ids: list[int] = body["input_ids"]
        n_out: int = body["sampling_params"]["max_new_tokens"]
        assert body["stream"] is True
        assert body["sampling_params"]["ignore_eos"] is True
        self.received.append(ids)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        leaving = False
        try:
            scenario = request.match_info["scenario"]
            if scenario == "error500":
                return web.Response(status=500, text="boom")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            p = len(ids)
            if scenario == "ok":
                for i in range(1, n_out + 1):
                    await asyncio.sleep(0.01)
                    final = {"type": "length", "length": n_out} if i == n_out else None
                    spec = {"spec_verify_ct": n_out // 2, "spec_accept_length": 2.0}
                    await resp.write(chunk(p, i, final, **(spec if final else {})))
            elif scenario == "multi":
                await resp.write(chunk(p, 1))
                await resp.write(chunk(p, 4))  # three tokens at once
                await resp.write(chunk(p, 4))  # no new token: not a chunk arrival
                await resp.write(chunk(p, 5, {"type": "length", "length": 5}, spec_verify_ct=2))
            elif scenario == "split":
                await resp.write(chunk(p, 1))
                data = chunk(p, 2, {"type": "length", "length": 2})
                await resp.write(data[:17])  # cut inside the JSON
                await asyncio.sleep(0.05)
                await resp.write(data[17:])
            elif scenario == "stop":
                await resp.write(chunk(p, 1))
                await resp.write(chunk(p, 3, {"type": "stop", "matched": 2}))
            elif scenario == "abort":
                await resp.write(chunk(p, 1))
                await resp.write(chunk(p, 1, {"type": "abort", "message": "out of memory"}))
            elif scenario == "inerror":
                await resp.write(chunk(p, 1))
                await resp.write(sse({"error": {"message": "bad things"}}))
            elif scenario == "garbage":
                await resp.write(chunk(p, 1))
                await resp.write(b"data: {not json\n\n")
            elif scenario == "nodone":
                await resp.write(chunk(p, 1))
                await resp.write_eof()
                return resp
            elif scenario == "drop":
                await resp.write(chunk(p, 1))
                await asyncio.sleep(0.02)
                assert request.transport is not None
                request.transport.close()
                return resp
            elif scenario == "slow":
                await resp.write(chunk(p, 1))
                await asyncio.sleep(5)
            self.in_flight -= 1  # before [DONE], so the count can never over-report
            leaving = True
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            if not leaving:
                self.in_flight -= 1


async def with_stub(body: Callable[[Stub, str], Awaitable[Any]]) -> Any:
    stub = Stub()
    url = await stub.start()
    try:
        return await body(stub, url)
    finally:
        await stub.stop()


async def send_one(
    base_url: str, ids: list[int], output_len: int, timeout_s: float
) -> RequestRecord:
    factory = RequestFactory(base_url, 1, LoadSpec(input_len=len(ids), output_len=output_len))
    conn = Connection(factory.host, factory.port)
    try:
        return await stream_request(conn, factory.prepare(ids), 7, timeout_s)
    finally:
        conn.close()


def one(scenario: str, output_len: int = 5, timeout_s: float = 30.0) -> RequestRecord:
    async def body(stub: Stub, url: str) -> RequestRecord:
        return await send_one(f"{url}/{scenario}", [101, 102, 103], output_len, timeout_s)

    return asyncio.run(with_stub(body))


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_parse_meta_ignores_lookalikes_in_text(separators: tuple[str, str]) -> None:
    # sglang writes compact JSON (orjson); json.dumps adds spaces. The text may
    # contain the key's name, but only escaped.
    line = {
        "text": 'say "meta_info": {"completion_tokens": 99}',
        "output_ids": [1, 2],
        "meta_info": {"completion_tokens": 2, "finish_reason": None},
    }
    data = json.dumps(line, separators=separators).encode()
    assert parse_meta(data) == {"completion_tokens": 2, "finish_reason": None}
    with pytest.raises(ServerError, match="oops"):
        parse_meta(b'{"error": {"message": "oops"}}')
    with pytest.raises(KeyError):
        parse_meta(b'{"text": "x"}')
    with pytest.raises(TypeError):
        parse_meta(b'{"meta_info": [1]}')
    # A key after meta_info (not what sglang sends) still parses, just slower.
    assert parse_meta(b'{"meta_info": {"completion_tokens": 3}, "index": 0}') == {
        "completion_tokens": 3
    }


def test_ok_stream() -> None:
    r = one("ok", output_len=4)
    assert r.ok, r.error
    assert (r.index, r.prompt_tokens, r.output_tokens, r.finish_reason) == (7, 3, 4, "length")
    assert r.chunk_tokens == (1, 1, 1, 1)
    assert len(r.chunk_times) == 4
    assert r.start < r.chunk_times[0] <= r.chunk_times[-1] <= r.end
    assert (r.spec_verify_ct, r.spec_accept_length) == (2, 2.0)


def test_multi_token_chunk() -> None:
    r = one("multi")
    assert r.ok, r.error
    assert r.chunk_tokens == (1, 3, 1)
    assert r.output_tokens == 5
    assert len(r.itls) == 4
    assert r.spec_verify_ct == 2
    assert r.spec_accept_length is None  # not sent by the stub


def test_chunk_split_across_writes() -> None:
    r = one("split", output_len=2)
    assert r.ok, r.error
    assert r.chunk_tokens == (1, 1)
    assert r.finish_reason == "length"


def test_early_stop_is_recorded_not_failed() -> None:
    r = one("stop", output_len=8)
    assert r.ok, r.error
    assert (r.output_tokens, r.finish_reason) == (3, "stop")


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("error500", "HTTP 500: boom"),
        ("abort", "aborted by server: out of memory"),
        ("inerror", "server error in stream: bad things"),
        ("garbage", "malformed stream"),
        ("nodone", "no [DONE]"),
        ("drop", "connection error"),
    ],
)
def test_failures_become_records(scenario: str, expected: str) -> None:
    r = one(scenario)
    assert not r.ok
    assert r.error is not None and expected in r.error
    assert r.output_tokens == 0
    assert r.end >= r.start


def test_timeout_becomes_record() -> None:
    r = one("slow", timeout_s=0.3)
    assert r.error == "timeout after 0.3s"
    assert r.chunk_tokens == (1,)  # what arrived before the timeout is kept
    assert r.e2e < 4.0  # generous: the stub would take 5 s


def test_connection_refused_becomes_record() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    r = asyncio.run(send_one(f"http://127.0.0.1:{port}", [101], 4, 5.0))
    assert r.error is not None and r.error.startswith("connection error")


@pytest.mark.parametrize("concurrency", [1, 4])
def test_run_level_closed_loop(concurrency: int) -> None:
    load = LoadSpec(
        concurrency=[concurrency],
        input_len=16,
        output_len=6,
        requests_per_level=10,
        seed=3,
        request_timeout_s=30,
    )
    progress: list[tuple[int, int]] = []

    async def body(stub: Stub, url: str) -> Any:
        result = await run_level(
            f"{url}/ok", concurrency, load, on_progress=lambda d, t: progress.append((d, t))
        )
        return stub, result

    stub, result = asyncio.run(with_stub(body))
    n_warmup = load.num_warmup(concurrency)
    assert n_warmup == concurrency
    assert len(stub.received) == 10 + n_warmup
    assert stub.max_in_flight == concurrency
    assert progress == [(i, 10) for i in range(1, 11)]
    assert [r.index for r in result.records] == list(range(10))
    assert all(r.ok for r in result.records)

    measured = {tuple(p) for p in make_input_ids(10, 16, level_seed(3, concurrency))}
    sent = {tuple(p) for p in stub.received}
    assert len(sent) == len(stub.received)  # every request had its own prompt
    assert measured <= sent

    m = result.metrics
    assert (m.completed, m.failed, m.status) == (10, 0, "ok")
    assert (m.input_tokens, m.output_tokens) == (160, 60)
    assert m.accept_length == pytest.approx(2.0)  # 6 tokens / 3 verify steps each
    assert result.started_at <= result.ended_at
    assert 0 < m.achieved_concurrency <= concurrency + 1e-6


def test_run_level_against_failing_server() -> None:
    load = LoadSpec(requests_per_level=6, warmup_requests=0, request_timeout_s=30)

    async def body(stub: Stub, url: str) -> Any:
        return stub, await run_level(f"{url}/error500", 2, load)

    stub, result = asyncio.run(with_stub(body))
    assert len(stub.received) == 6
    assert result.metrics.status == "failed"
    assert result.metrics.error == "6 of 6 requests: HTTP 500: boom"


def test_run_level_sync_without_server() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    load = LoadSpec(requests_per_level=3, warmup_requests=1, request_timeout_s=5)
    result = run_level_sync(f"http://127.0.0.1:{port}", 2, load)
    assert len(result.records) == 3
    assert result.metrics.failed == 3
    assert result.metrics.status == "failed"


def test_generate_decoder_fast_and_full_paths_agree() -> None:
    compact = json.dumps(
        {"text": "a b", "meta_info": {"completion_tokens": 2, "finish_reason": None}},
        separators=(",", ":"),
    ).encode()
    spaced = json.dumps({"text": "a b c", "meta_info": {"completion_tokens": 3}}).encode()
    dec = GenerateDecoder()
    dec(compact, 1.0)  # read from the bytes: meta_info is not decoded
    assert (dec.tokens, dec.meta) == ([2], None)
    dec(spaced, 2.0)  # no compact null finish_reason: decoded in full
    assert (dec.tokens, dec.times, dec.meta) == ([2, 1], [1.0, 2.0], {"completion_tokens": 3})


def openai_chunk(text: str | None, usage: dict | None = None, finish: str | None = None) -> bytes:
    choices = [] if text is None else [{"index": 0, "text": text, "finish_reason": finish}]
    return json.dumps({"object": "text_completion", "choices": choices, "usage": usage}).encode()


def test_openai_decoder_counts() -> None:
    dec = OpenAIDecoder(chat=False)
    dec(openai_chunk("ab"), 1.0)
    dec(openai_chunk(""), 1.5)  # no text: not an arrival
    dec(openai_chunk("cd", finish="length"), 2.0)
    dec(openai_chunk(None, {"prompt_tokens": 7, "completion_tokens": 5}), 2.1)
    dec(b"[DONE]", 2.2)
    assert (dec.times, dec.tokens, dec.total, dec.prompt) == ([1.0, 2.0], [1, 1], 5, 7)
    assert (dec.finish, dec.done, dec.end, dec.exact) == ("length", True, 2.2, False)

    exact = OpenAIDecoder(chat=True)
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}}], "usage": None}
    exact(json.dumps(role).encode(), 0.5)
    for t, n in ((1.0, 2), (2.0, 5)):
        usage = {"prompt_tokens": 3, "completion_tokens": n}
        body = {"choices": [{"delta": {"content": "x"}, "finish_reason": None}], "usage": usage}
        exact(json.dumps(body).encode(), t)
    assert (exact.tokens, exact.times, exact.exact) == ([2, 3], [1.0, 2.0], True)

    err = OpenAIDecoder(chat=False)
    err(b'{"object": "error", "message": "context too long", "code": 400}', 1.0)
    assert err.error == "server error in stream: context too long"


def _bracketed_offset_ns() -> tuple[int, int]:
    """(wall - perf_counter, the uncertainty): a wall-clock read between two perf_counter
    reads is within half their distance of the midpoint, however long this took."""
    a = time.perf_counter_ns()
    wall = time.time_ns()
    b = time.perf_counter_ns()
    return wall - (a + b) // 2, (b - a) // 2 + 1


def test_clock_offset_maps_perf_counter_to_wall_time() -> None:
    """Every sample clock_offset_ns takes lies inside [before, after], so its answer is
    within half that span of the truth; the reference is within its own bracket. Being
    preempted widens the spans, never breaks the bound."""
    reference, uncertainty = _bracketed_offset_ns()
    before = time.perf_counter_ns()
    offset = clock_offset_ns()
    after = time.perf_counter_ns()
    assert abs(offset - reference) <= (after - before) // 2 + 1 + uncertainty
