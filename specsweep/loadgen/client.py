"""One streamed request, timed chunk by chunk, for sglang's native and OpenAI endpoints.

This is the hot path of the load generator: the decoders below run inside the
connection's ``data_received`` for every ``data:`` line, so they keep numbers
only (never the text) and decode as little as they can. On ``/generate`` the
``text`` is cumulative, so only the ``meta_info`` object at the end of each line
is decoded (decoding whole lines is O(n^2) per request).

How tokens are counted per chunk (what ITL is split over):

* ``/generate``: the increase of ``meta_info.completion_tokens``, exactly. Only
  the last chunk's meta_info (the one with a finish_reason) is decoded in full;
  before it, the count is read from the bytes.
* OpenAI endpoints: the request asks for ``stream_options.continuous_usage_stats``
  as well as ``include_usage``; when the server sends ``usage`` in every chunk
  (sglang does), tokens per chunk are the increase of ``usage.completion_tokens``,
  exactly as for /generate. A server that ignores the option sends ``usage: null``
  on its chunks: every chunk with text then counts one token, and the total comes
  from the final ``usage`` chunk. The record checks that the chunks add up to that
  total; where they do not (several tokens in a chunk), or no total came, its
  tokens per chunk are unknown (``chunk_tokens_known`` False): per-token ITL and
  anything read from chunk sizes (accept lengths) must not be taken from them.

Every failure of a single request becomes a record with ``error`` set; nothing
here raises for a request's failure (cancellation still propagates).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import orjson

from specsweep.errors import ConnectionFailed, ServerError
from specsweep.loadgen.http import Connection
from specsweep.loadgen.metrics import RequestRecord

# Inside a JSON string every quote is escaped, so this byte sequence can only be the key.
_META_KEY = b'"meta_info":'
_DONE = b"[DONE]"
# Chunks before the last carry a null finish_reason (in sglang's compact JSON); for
# them the count is read straight from the bytes, which is 3x cheaper than decoding.
_NOT_DONE = b'"finish_reason":null'
_COUNT = re.compile(rb'"completion_tokens":\s*(\d+)')
_decode_prefix = json.JSONDecoder().raw_decode


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request ready to go: its full HTTP bytes and what is known of its prompt."""

    endpoint: str  # "generate" | "completions" | "chat"
    wire: bytes
    prompt_tokens: int  # exact for token ids; an estimate for text, until the server says
    category: str | None = None  # the prompt's category ("random" for random prompts)
    output_len: int | None = None  # the output tokens asked for (ignore_eos)


def parse_meta(data: bytes) -> dict[str, Any]:
    """The meta_info of one /generate SSE line, decoding as little of the line as possible."""
    at = data.rfind(_META_KEY)
    if at >= 0:
        tail = data[at + len(_META_KEY) :]
        try:  # sglang puts meta_info last: the object is the tail minus the closing brace
            meta = orjson.loads(tail[:-1])
        except orjson.JSONDecodeError:
            meta = _decode_prefix(tail.decode().lstrip())[0]
    else:  # error chunks (and anything unusual): decode it all
        chunk = orjson.loads(data)
        if isinstance(chunk, dict) and "error" in chunk:
            raise ServerError(_error_message(chunk["error"]))
        meta = chunk["meta_info"]
    if not isinstance(meta, dict):
        raise TypeError(f"meta_info is {type(meta).__name__}, not an object")
    return meta


def _error_message(err: Any) -> str:
    return str(err.get("message", err)) if isinstance(err, dict) else str(err)


class _Decoder:
    """State of one response; called with every ``data:`` line and its arrival time."""

    __slots__ = ("done", "end", "error", "finish", "meta", "seen", "times", "tokens", "total")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.seen = 0  # tokens attributed to chunks so far
        self.total: int | None = None  # the server's final count, when it gives one
        self.meta: dict[str, Any] | None = None
        self.finish: Any = None
        self.done = False
        self.end: float | None = None
        self.error: str | None = None

    def _tokens_to(self, total: int, now: float) -> None:
        if total > self.seen:
            self.times.append(now)
            self.tokens.append(total - self.seen)
            self.seen = total


class GenerateDecoder(_Decoder):
    """sglang's /generate: cumulative ``meta_info.completion_tokens`` per line."""

    __slots__ = ()

    def __call__(self, data: bytes, now: float) -> None:
        if data == _DONE:
            self.done, self.end = True, now
            return
        if self.done or self.error is not None:
            return
        at = data.rfind(_META_KEY)
        count = _COUNT.search(data, at) if at >= 0 and data.find(_NOT_DONE, at) > 0 else None
        if count is not None:  # a chunk before the last: only its token count matters
            total = int(count[1])
        else:
            try:
                meta = parse_meta(data)
            except ServerError as exc:
                self.error, self.end = f"server error in stream: {exc}", now
                return
            self.meta = meta
            self.finish = meta.get("finish_reason")
            total = int(meta["completion_tokens"])
        if total > self.seen:  # (_tokens_to, inlined: this runs for every chunk)
            self.times.append(now)
            self.tokens.append(total - self.seen)
            self.seen = total


class OpenAIDecoder(_Decoder):
    """/v1/completions (``choices[0].text``) and /v1/chat/completions (``delta.content``)."""

    __slots__ = ("chat", "exact", "prompt")

    def __init__(self, chat: bool) -> None:
        super().__init__()
        self.chat = chat
        self.exact = False  # usage arrived with the text: tokens per chunk are known
        self.prompt: int | None = None

    def __call__(self, data: bytes, now: float) -> None:
        if data == _DONE:
            self.done, self.end = True, now
            return
        if self.done or self.error is not None:
            return
        chunk = orjson.loads(data)
        if "error" in chunk or chunk.get("object") == "error":
            message = _error_message(chunk.get("error", chunk))
            self.error, self.end = f"server error in stream: {message}", now
            return
        choices = chunk.get("choices") or ()
        usage = chunk.get("usage")
        count = usage.get("completion_tokens") if usage else None
        if count is not None:
            self.total = int(count)
            self.prompt = usage.get("prompt_tokens", self.prompt)
        if not choices:
            return  # the usage-only chunk at the end
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish = choice["finish_reason"]
        if count is not None and (self.exact or not self.seen):
            self.exact = True
            self._tokens_to(int(count), now)
            return
        text = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
        if text:
            self.times.append(now)
            self.tokens.append(1)
            self.seen += 1


def make_decoder(endpoint: str) -> GenerateDecoder | OpenAIDecoder:
    if endpoint == "generate":
        return GenerateDecoder()
    return OpenAIDecoder(chat=endpoint == "chat")


def _finish_type(finish_reason: Any) -> str | None:
    """sglang sends {"type": "length", ...} natively and a bare string on OpenAI routes."""
    if isinstance(finish_reason, dict):
        kind = finish_reason.get("type")
        return str(kind) if kind is not None else None
    return str(finish_reason) if finish_reason is not None else None


def _abort_message(finish_reason: Any) -> str:
    if isinstance(finish_reason, dict) and finish_reason.get("message"):
        return f"aborted by server: {finish_reason['message']}"
    return "aborted by server"


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _float_or_none(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _histogram_or_none(value: Any) -> tuple[int, ...] | None:
    """A list of non-negative counts, else None (a server sending something else)."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None
    return tuple(value)


async def stream_request(
    conn: Connection,
    request: PreparedRequest,
    index: int,
    timeout_s: float,
    repeat: int = 0,
) -> RequestRecord:
    """Send one request on conn and record when each of its tokens arrived."""
    dec = make_decoder(request.endpoint)
    error: str | None = None
    start = perf_counter()
    try:
        exchange = await conn.stream(request.wire, dec, timeout_s)
        if exchange.status != 200:
            detail = exchange.error_body.decode("utf-8", "replace").strip()
            error = f"HTTP {exchange.status}: {detail}"
    except TimeoutError:
        error = None if dec.done else f"timeout after {timeout_s:g}s"
    except ConnectionFailed as exc:
        error = None if dec.done else f"connection error: {exc}"
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        error = None if dec.done else f"malformed stream: {type(exc).__name__}: {exc}"
    end = dec.end if dec.end is not None else perf_counter()

    error = error or dec.error
    finish_type = _finish_type(dec.finish)
    if error is None:
        if finish_type == "abort":
            error = _abort_message(dec.finish)
        elif not dec.done and finish_type is None:
            error = "stream ended before the request finished (no [DONE])"

    meta = dec.meta or {}
    prompt = meta.get("prompt_tokens") if request.endpoint == "generate" else dec.prompt
    output = dec.total if dec.total is not None else dec.seen
    if dec.total is None and finish_type == "length" and request.output_len:
        output = request.output_len  # no usage at all: max_new_tokens was reached
    # /generate counts every chunk from meta_info; an OpenAI stream must add up to usage
    known = request.endpoint == "generate" or (dec.total is not None and dec.seen == dec.total)
    return RequestRecord(
        index=index,
        start=start,
        end=end,
        chunk_times=tuple(dec.times),
        chunk_tokens=tuple(dec.tokens),
        chunk_tokens_known=known,
        prompt_tokens=_int_or_none(prompt) or request.prompt_tokens,
        output_tokens=output if error is None else 0,
        finish_reason=finish_type,
        spec_verify_ct=_int_or_none(meta.get("spec_verify_ct")),
        spec_accept_length=_float_or_none(meta.get("spec_accept_length")),
        spec_correct_drafts_histogram=_histogram_or_none(meta.get("spec_correct_drafts_histogram")),
        error=error,
        repeat=repeat,
        category=request.category,
    )
