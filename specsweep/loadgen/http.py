"""A minimal HTTP/1.1 client for server-sent event streams, one connection per stream.

Why not aiohttp: at hundreds of streams the client's per-chunk cost is the
measurement's floor. Through aiohttp every SSE line wakes a task through its
StreamReader (about 2x the CPU per streamed token of this client, measured
with benchmarks/loadgen_ceiling.py). Here each connection is a non-blocking
socket watched by the event loop; a read is de-chunked, split into ``data:``
lines and handed to a decoder inside the reader callback, with no task switch
per chunk. A closed loop needs no pool either: each of the C streams owns one
keep-alive connection.

Arrival times come from the kernel where it can say (``SO_TIMESTAMPNS``: when
the packet reached the host's network stack), converted to the
``perf_counter`` clock. A user-space stamp is late by whatever the process was
doing when the bytes came in (another stream's chunk, a garbage collection, a
time slice given to another process); the kernel's is not. Reads without one
fall back to ``perf_counter()`` at the read. A read that holds several chunks
gets one stamp (the kernel reports its last packet's).

What is supported is what sglang (uvicorn) and the test stubs send: responses
with ``Content-Length``, ``Transfer-Encoding: chunked``, or a body that ends
when the server closes. No redirects, proxies, TLS or compression (requests go
to one host, normally on loopback or a private network).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
import sys
import time
from collections.abc import Callable
from time import perf_counter
from urllib.parse import urlsplit

from specsweep.errors import ConnectionFailed

ERROR_BODY_BYTES = 200
_READ_BYTES = 256 * 1024
# SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) is Linux's; Python's socket module does not
# name it. The stamp is a struct timespec of two 64-bit fields.
_SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None
_TIMESPEC = struct.Struct("qq")
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if _SO_TIMESTAMPNS is not None else 0

# Parser states.
_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _TO_CLOSE, _IDLE = range(8)

OnData = Callable[[bytes, float], None]
# Searched in the lower-cased response head.
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[^\r]*chunked")
_LENGTH_HEADER = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)")
_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close")


def split_url(base_url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http:// base URL."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"need an http:// URL with a host, got {base_url!r}")
    return parts.hostname, parts.port or 80, parts.path.rstrip("/")


def build_request(host: str, port: int, path: str, body: bytes) -> bytes:
    """The complete bytes of one JSON POST, built once per request before the clock starts."""
    authority = f"[{host}]" if ":" in host else host
    return (
        f"POST {path} HTTP/1.1\r\nHost: {authority}:{port}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Exchange:
    """What came back for one request: the status and, unless it was 200, the body's start."""

    __slots__ = ("error_body", "status")

    def __init__(self) -> None:
        self.status = 0
        self.error_body = bytearray()


def kernel_timestamps() -> bool:
    """Whether this platform can stamp arrivals in the kernel (Linux can)."""
    if _SO_TIMESTAMPNS is None:
        return False
    with socket.socket() as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            return False
    return True


def clock_offset_ns() -> int:
    """CLOCK_REALTIME - perf_counter, in ns (both move together but for clock steps)."""
    best = None
    for _ in range(3):  # the narrowest of three brackets, in case one was preempted
        a = time.perf_counter_ns()
        real = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, real - (a + b) // 2)
    assert best is not None
    return best[1]


class _Stream:
    """One socket and the parser of its current response.

    ``data:`` lines of a 200 response go to ``on_data`` with their arrival time.
    """

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.loop = loop
        self.waiter: asyncio.Future[None] | None = None
        self.exchange = Exchange()
        self.on_data: OnData | None = None
        self.closed = False
        self.received = False  # any byte of the current response
        self.offset_ns = 0
        self._state = _IDLE
        self._rest = b""  # unparsed framing bytes
        self._lines = b""  # body bytes not yet ending in a newline
        self._remaining = 0
        self._keep_alive = True
        self._stamped = False
        if _SO_TIMESTAMPNS is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self._stamped = True
        loop.add_reader(sock.fileno(), self._readable)

    def start(self, waiter: asyncio.Future[None], on_data: OnData) -> None:
        self.waiter, self.on_data = waiter, on_data
        self.exchange = Exchange()
        self.received = False
        self.offset_ns = clock_offset_ns()
        self._state, self._rest, self._lines = _HEAD, b"", b""

    async def write(self, data: bytes) -> None:
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._finish(ConnectionFailed(f"{type(exc).__name__}: {exc}"))
            return
        if sent < len(data):  # a full send buffer: rare, requests are small
            try:
                await self.loop.sock_sendall(self.sock, data[sent:])
            except OSError as exc:
                self._finish(ConnectionFailed(f"{type(exc).__name__}: {exc}"))

    def _finish(self, exc: BaseException | None) -> None:
        waiter, self.waiter = self.waiter, None
        self._state = _IDLE
        if exc is not None or not self._keep_alive:
            self.abort()
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()

    def _lost(self, exc: OSError | None) -> None:
        state = self._state
        self.abort()
        if state == _TO_CLOSE and exc is None:
            self._finish(None)
        else:
            cause = f"{type(exc).__name__}: {exc}" if exc else "server closed the connection"
            self._finish(ConnectionFailed(cause))

    def _readable(self) -> None:
        try:
            if self._stamped:
                data, ancillary, _, _ = self.sock.recvmsg(_READ_BYTES, _STAMP_SPACE)
            else:
                data, ancillary = self.sock.recv(_READ_BYTES), []
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        now = perf_counter()
        if not data:
            self._lost(None)
            return
        for level, kind, stamp in ancillary:  # the kernel's arrival time, if it looks right
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(stamp) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(stamp)
                kernel = (sec * 1_000_000_000 + nsec - self.offset_ns) / 1e9
                if now - 1.0 < kernel <= now:
                    now = kernel
        if self.waiter is None:  # bytes nobody asked for: the connection is out of step
            self.abort()
            return
        self.received = True
        try:
            self._parse(self._rest + data if self._rest else data, now)
        except Exception as exc:  # a decoder's complaint or broken framing ends this exchange
            self._finish(exc)

    def _parse(self, buf: bytes, now: float) -> None:
        pos, end = 0, len(buf)
        while pos < end and self.waiter is not None:
            state = self._state
            if state == _SIZE:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                line = buf[pos:nl]
                size = int(line.split(b";", 1)[0] if b";" in line else line, 16)
                pos = nl + 2
                if size == 0:
                    self._state = _TRAILER
                elif pos + size + 2 <= end:  # the whole chunk is here: the common case
                    self._body(buf[pos : pos + size], now)
                    pos += size
                    self._state = _CRLF
                else:
                    self._remaining = size
                    self._state = _DATA
            elif state == _CRLF:
                if end - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                pos += 2
                self._state = _SIZE
            elif state in (_DATA, _LENGTH):
                take = min(end - pos, self._remaining)
                self._body(buf[pos : pos + take], now)
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    if state == _LENGTH:
                        self._finish(None)
                    else:
                        self._state = _CRLF
            elif state == _TRAILER:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                if nl == pos:
                    self._finish(None)
                pos = nl + 2
            elif state == _HEAD:
                stop = buf.find(b"\r\n\r\n", pos)
                if stop < 0:
                    break
                self._head(buf[pos:stop])
                pos = stop + 4
            else:  # _TO_CLOSE
                self._body(buf[pos:], now)
                pos = end
        self._rest = buf[pos:] if pos < end and self.waiter is not None else b""

    def _head(self, head: bytes) -> None:
        if not head.startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP/1.x response: {head[:40]!r}")
        self.exchange.status = int(head[9:12])
        lower = head.lower()  # header names are case-insensitive
        self._keep_alive = head.startswith(b"HTTP/1.1") and not _CLOSE.search(lower)
        if _CHUNKED.search(lower):
            self._state = _SIZE
        elif (length := _LENGTH_HEADER.search(lower)) is not None:
            self._remaining = int(length[1])
            self._state = _LENGTH
            if self._remaining == 0:
                self._finish(None)
        else:
            self._state = _TO_CLOSE
            self._keep_alive = False

    def _body(self, piece: bytes, now: float) -> None:
        if self.exchange.status != 200:
            room = ERROR_BODY_BYTES - len(self.exchange.error_body)
            if room > 0:
                self.exchange.error_body += piece[:room]
            return
        lines = (self._lines + piece if self._lines else piece).split(b"\n")
        self._lines = lines.pop()  # b"" unless the last line is still incomplete
        on_data = self.on_data
        assert on_data is not None
        for line in lines:
            if line.startswith(b"data:"):
                on_data(line[5:].strip(), now)


class Connection:
    """One keep-alive connection that a single stream uses for its requests in turn."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._stream: _Stream | None = None
        self.used = False  # served a request before (so a failure may just mean it went stale)

    async def _connect(self) -> _Stream:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from None
        error: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.used = False
            return _Stream(sock, loop)
        raise ConnectionFailed(f"{type(error).__name__}: {error}")

    async def stream(self, request: bytes, on_data: OnData, timeout_s: float) -> Exchange:
        """Send one request; feed its ``data:`` lines to on_data until the response ends.

        Raises ConnectionFailed, TimeoutError, or whatever on_data raised (the
        connection is then dropped). A reused connection that the server had
        already closed is replaced once, transparently: no byte of a response
        came back, so the request never reached the server.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for attempt in (0, 1):
            stream = self._stream
            if stream is None or stream.closed:
                stream = self._stream = await asyncio.wait_for(
                    self._connect(), max(deadline - loop.time(), 0)
                )
            waiter: asyncio.Future[None] = loop.create_future()
            stream.start(waiter, on_data)
            timer = loop.call_at(deadline, self._expire, stream, waiter)
            try:
                await stream.write(request)
                await waiter
            except ConnectionFailed:
                if attempt == 0 and self.used and not stream.received:
                    self._stream = None
                    continue
                raise
            finally:
                timer.cancel()
            self.used = True
            return stream.exchange
        raise AssertionError("unreachable")

    @staticmethod
    def _expire(stream: _Stream, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            stream.waiter = None
            stream.abort()
            waiter.set_exception(TimeoutError())

    def close(self) -> None:
        if self._stream is not None:
            self._stream.abort()
            self._stream = None
