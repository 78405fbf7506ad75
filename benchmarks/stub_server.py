"""A fast loopback stand-in for sglang's streaming API, for benchmarks and timing tests.

It speaks what specsweep's load generator reads: ``POST /generate`` as sglang
streams it (SSE ``data: {json}`` events with the *cumulative* ``text``, the new
``output_ids`` and a ``meta_info`` whose ``completion_tokens`` count up, the
last one with ``finish_reason`` and the speculative fields, then ``data:
[DONE]``), and ``/v1/completions`` / ``/v1/chat/completions`` as sglang's OpenAI
layer streams them (text deltas, a final ``usage`` chunk when asked for). Bodies
go out with ``Transfer-Encoding: chunked``, one HTTP chunk per event, like
uvicorn does.

Two engines share the response plan (which bytes, at what offset after the
request arrived):

* **fast** (default): a raw asyncio protocol (uvloop when installed) that sends
  each event on its own loop turn, or at its deadline when delays are given.
  With ``--processes W`` every process binds the port with SO_REUSEPORT, so
  the stub is not what a benchmark of the client measures.
* **precise** (``--precise``): one thread per connection with blocking sockets,
  sleeping to absolute deadlines (``clock_nanosleep``, tens of microseconds)
  instead of an event loop's millisecond timers. It records when every event
  was written, served at ``GET /stub/log``, so a test can compare what the
  client measured with what was actually sent.

    .venv/bin/python benchmarks/stub_server.py --port 8000 --ttft-ms 30 --itl-ms 20 \\
        --tokens-per-chunk 1,3,2 --processes 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing import get_context
from time import perf_counter
from typing import Any

try:
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # the stub also runs under a plain interpreter

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


MODEL = "stub-model"
# Short words that most tokenizers keep as one token each.
_WORD_TEXT = "the of and to in is it that for on was with as at by"
_WORDS = [f" {w}" for w in _WORD_TEXT.split()]
_SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_LAST_CHUNK = b"0\r\n\r\n"


@dataclass(frozen=True)
class StubConfig:
    """What every response looks like; delays are per stream, from the request's arrival."""

    output_len: int = 0  # tokens per response; 0 = as many as the request asks for
    tokens_per_chunk: tuple[int, ...] = (1,)  # cycled: (1, 3, 2) = chunks of 1, 3, 2, 1, ...
    ttft_ms: float = 0.0
    itl_ms: float = 0.0  # gap between consecutive chunks (not per token)
    spec: bool | None = None  # send spec_verify_ct; default: when a chunk has > 1 token
    continuous_usage: bool = True  # honour stream_options.continuous_usage_stats (sglang does)


@dataclass
class Plan:
    """One response: its head and the events with their send offsets (seconds)."""

    head: bytes
    events: tuple[tuple[float, bytes], ...]
    log_key: list[int] | str | None = None


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: Any) -> bytes:
    return _frame(b"data: " + _dumps(obj) + b"\n\n")


def _plain(status: str, body: bytes, ctype: str = "application/json") -> Plan:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return Plan(head + body, ())


def _chunk_sizes(cfg: StubConfig, n: int) -> list[int]:
    sizes, i = [], 0
    while n > 0:
        k = min(cfg.tokens_per_chunk[i % len(cfg.tokens_per_chunk)], n)
        sizes.append(k)
        n -= k
        i += 1
    return sizes


def _offsets(cfg: StubConfig, count: int) -> list[float]:
    return [(cfg.ttft_ms + i * cfg.itl_ms) / 1000.0 for i in range(count)]


def plan_response(cfg: StubConfig, method: str, path: str, body: bytes) -> Plan:
    """The whole response to one request, decided when it arrives."""
    if method == "GET" and path in ("/health", "/health_generate"):
        return _plain("200 OK", b"")
    if method == "GET" and path == "/v1/models":
        return _plain("200 OK", _dumps({"object": "list", "data": [{"id": MODEL}]}))
    if method != "POST" or path not in ("/generate", "/v1/completions", "/v1/chat/completions"):
        return _plain("404 Not Found", b'{"detail":"Not Found"}')
    try:
        req = json.loads(body)
    except ValueError as exc:
        return _plain("400 Bad Request", _dumps({"error": {"message": str(exc)}}))
    if not req.get("stream"):
        return _plain("400 Bad Request", b'{"error":{"message":"the stub only streams"}}')
    if path == "/generate":
        asked = int((req.get("sampling_params") or {}).get("max_new_tokens", 128))
        ids = req.get("input_ids")
        key: list[int] | str = ids[:8] if isinstance(ids, list) else str(req.get("text", ""))[:64]
        prompt = len(ids) if isinstance(ids, list) else len(str(req.get("text", "")).split())
        events = _generate_events(cfg, asked, prompt)
    else:
        asked = int(req.get("max_tokens") or 16)
        chat = path.endswith("/chat/completions")
        text = str((req.get("messages") or [{}])[0].get("content", "")) if chat else ""
        text = text if chat else str(req.get("prompt", ""))
        key, prompt = text[:64], len(text.split())
        opts = req.get("stream_options") or {}
        usage = (bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats")))
        events = _openai_events(cfg, asked, prompt, chat, *usage)
    return Plan(_SSE_HEADERS, events, key)


def _length(cfg: StubConfig, asked: int) -> tuple[list[int], bool]:
    """Chunk sizes of a response, and whether it stops early (as if on EOS)."""
    n = min(cfg.output_len, asked) if cfg.output_len > 0 else asked
    return _chunk_sizes(cfg, n), n < asked


# Plans are cached: many streams asking the same thing at once (every closed-loop
# wave) must not make the stub late by building the same bytes over and over.
@lru_cache(maxsize=256)
def _generate_events(cfg: StubConfig, asked: int, prompt: int) -> tuple[tuple[float, bytes], ...]:
    sizes, stopped = _length(cfg, asked)
    spec = cfg.spec if cfg.spec is not None else max(cfg.tokens_per_chunk) > 1
    text, done, events = "", 0, []
    for step, (k, at) in enumerate(zip(sizes, _offsets(cfg, len(sizes)), strict=True), 1):
        new = [100 + (done + j) % 1000 for j in range(k)]
        text += "".join(_WORDS[(done + j) % len(_WORDS)] for j in range(k))
        done += k
        last = step == len(sizes)
        meta: dict[str, Any] = {
            "id": "stub",
            "finish_reason": None,
            "prompt_tokens": prompt,
            "weight_version": "default",
            "completion_tokens": done,
            "cached_tokens": 0,
        }
        if last:
            meta["finish_reason"] = (
                {"type": "stop", "matched": 2} if stopped else {"type": "length", "length": done}
            )
        if spec:
            meta["spec_verify_ct"] = step
            meta["spec_accept_length"] = done / step
        if last:
            meta["e2e_latency"] = at
        event = _sse({"text": text, "output_ids": new, "meta_info": meta})
        events.append((at, event + _frame(b"data: [DONE]\n\n") + _LAST_CHUNK if last else event))
    return tuple(events)


@lru_cache(maxsize=256)
def _openai_events(
    cfg: StubConfig, asked: int, prompt: int, chat: bool, include_usage: bool, continuous: bool
) -> tuple[tuple[float, bytes], ...]:
    sizes, stopped = _length(cfg, asked)
    base = {"id": "stub", "object": "chat.completion.chunk" if chat else "text_completion"}
    base |= {"created": int(time.time()), "model": MODEL}
    events: list[tuple[float, bytes]] = []
    offsets = _offsets(cfg, len(sizes))
    if chat:  # sglang opens a chat stream with the role and no content
        first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        events.append((offsets[0], _sse({**base, "choices": [first], "usage": None})))
    done = 0
    for step, (k, at) in enumerate(zip(sizes, offsets, strict=True), 1):
        piece = "".join(_WORDS[(done + j) % len(_WORDS)] for j in range(k))
        done += k
        finish = ("stop" if stopped else "length") if step == len(sizes) else None
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        choice |= {"delta": {"content": piece}} if chat else {"text": piece}
        usage = None
        if continuous and cfg.continuous_usage:
            usage = {"prompt_tokens": prompt, "completion_tokens": done}
            usage["total_tokens"] = prompt + done
        events.append((at, _sse({**base, "choices": [choice], "usage": usage})))
    tail = b""
    if include_usage:
        usage = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
        tail = _sse({**base, "choices": [], "usage": usage})
    at, event = events[-1]
    events[-1] = (at, event + tail + _frame(b"data: [DONE]\n\n") + _LAST_CHUNK)
    return tuple(events)


def _parse_head(buf: bytes | bytearray) -> tuple[str, str, int, int] | None:
    """(method, path, body length, head length) once the request head is complete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return method, path.split("?", 1)[0], length, end + 4


class _FastConnection(asyncio.Protocol):
    """One keep-alive connection; requests on it are answered one after another."""

    def __init__(self, cfg: StubConfig) -> None:
        self.cfg = cfg
        self.buf = bytearray()
        self.busy = False
        self.transport: asyncio.Transport | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next_request()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.can_write.set()

    def _next_request(self) -> None:
        if self.busy or (parsed := _parse_head(self.buf)) is None:
            return
        method, path, length, head = parsed
        if len(self.buf) < head + length:
            return
        body = bytes(self.buf[head : head + length])
        del self.buf[: head + length]
        self.busy = True
        plan = plan_response(self.cfg, method, path, body)
        asyncio.get_running_loop().create_task(self._send(plan, asyncio.get_running_loop().time()))

    async def _send(self, plan: Plan, arrived: float) -> None:
        transport = self.transport
        assert transport is not None
        loop = asyncio.get_running_loop()
        transport.write(plan.head)
        for at, data in plan.events:
            delay = arrived + at - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)  # 0: one loop turn, like a server
            if not self.can_write.is_set():
                await self.can_write.wait()
            if transport.is_closing():
                return
            transport.write(data)
        self.busy = False
        if self.buf:
            self._next_request()


def _listen_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    return sock


async def start_server(
    cfg: StubConfig, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None
) -> asyncio.Server:
    """The fast engine on the running loop (tests run it beside the client under test)."""
    loop = asyncio.get_running_loop()
    if sock is not None:
        return await loop.create_server(lambda: _FastConnection(cfg), sock=sock)
    return await loop.create_server(lambda: _FastConnection(cfg), host, port)


def serve_fast(sock: socket.socket, cfg: StubConfig) -> None:
    """Serve on an already listening socket until killed."""
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run

    async def main() -> None:
        server = await start_server(cfg, sock=sock)
        await server.serve_forever()

    run(main())


class PreciseServer:
    """Thread-per-connection server that sends at absolute deadlines and logs send times."""

    def __init__(self, sock: socket.socket, cfg: StubConfig) -> None:
        self.sock = sock
        self.cfg = cfg
        self.log: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def serve_forever(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buf = bytearray()
        with conn:
            while True:
                parsed = _parse_head(buf)
                if parsed is None or len(buf) < parsed[3] + parsed[2]:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                    continue
                arrived = perf_counter()
                method, path, length, head = parsed
                body = bytes(buf[head : head + length])
                del buf[: head + length]
                if path == "/stub/log":
                    with self._lock:
                        plan, self.log = _plain("200 OK", _dumps(self.log)), []
                else:
                    plan = plan_response(self.cfg, method, path, body)
                try:
                    self._send(conn, plan, arrived)
                except OSError:
                    return

    def _send(self, conn: socket.socket, plan: Plan, arrived: float) -> None:
        conn.sendall(plan.head)
        sent: list[float] = []
        done: list[float] = []
        for at, data in plan.events:
            delay = arrived + at - perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent.append(perf_counter())
            conn.sendall(data)
            done.append(perf_counter())
        if plan.log_key is not None:
            entry = {"key": plan.log_key, "arrived": arrived, "sent": sent, "done": done}
            with self._lock:
                self.log.append(entry)


def _child(port: int, host: str, cfg: StubConfig, cpus: list[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    serve_fast(_listen_socket(host, port), cfg)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    p.add_argument("--output-len", type=int, default=0, help="0: as the request asks")
    p.add_argument("--tokens-per-chunk", default="1", help="e.g. 4 or a cycle like 1,3,2")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0, help="gap between chunks")
    p.add_argument("--processes", type=int, default=1, help="fast engine: SO_REUSEPORT workers")
    p.add_argument("--cpus", default="", help="pin the stub to these CPUs, e.g. 1 or 2-3")
    p.add_argument("--precise", action="store_true", help="threads, exact deadlines, send log")
    args = p.parse_args(argv)
    cfg = StubConfig(
        output_len=args.output_len,
        tokens_per_chunk=tuple(int(k) for k in args.tokens_per_chunk.split(",")),
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
    )
    # SIGTERM exits normally, so multiprocessing ends the forked workers too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cpus = parse_cpus(args.cpus)
    if cpus:
        os.sched_setaffinity(0, cpus)
    sock = _listen_socket(args.host, args.port)
    port = sock.getsockname()[1]
    if args.precise:
        print(f"listening on http://{args.host}:{port}", flush=True)
        PreciseServer(sock, cfg).serve_forever()
        return
    ctx = get_context("fork")  # before any loop or thread exists, so forking is safe
    for _ in range(args.processes - 1):
        ctx.Process(target=_child, args=(port, args.host, cfg, cpus), daemon=True).start()
    print(f"listening on http://{args.host}:{port}", flush=True)
    serve_fast(sock, cfg)


def parse_cpus(spec: str) -> list[int]:
    """'0,2-3' -> [0, 2, 3] (taskset's list syntax)."""
    cpus: list[int] = []
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
