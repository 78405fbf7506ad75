"""One streamed request to sglang's native ``/generate``, timed chunk by chunk.

This is the hot path of the load generator: at hundreds of concurrent streams
on a small client machine, per-chunk overhead shows up as fake latency. So
nothing is logged per chunk, only numbers are kept (never the text), and only
the ``meta_info`` object of each SSE line is decoded: ``text`` (and
``output_ids``) are cumulative, so decoding whole lines costs O(n^2) per request
(~80 us per chunk at 1,000 tokens, against ~5 us for meta_info alone).

Every failure of a single request becomes a record with ``error`` set; this
function does not raise for a request's failure (cancellation still propagates).
"""

from __future__ import annotations

import json
from time import perf_counter
from typing import Any, TypeVar

import aiohttp

from specsweep.loadgen.metrics import RequestRecord

_ERROR_BODY_CHARS = 200
# Inside a JSON string every quote is escaped, so this byte sequence can only be
# the key itself.
_META_KEY = b'"meta_info":'
_decode_prefix = json.JSONDecoder().raw_decode
_N = TypeVar("_N", int, float)


class _ServerError(Exception):
    """The server reported an error inside the stream."""


def _parse_meta(data: bytes) -> dict[str, Any]:
    """The meta_info of one SSE data line, decoding as little of the line as possible."""
    at = data.rfind(_META_KEY)
    if at >= 0:
        meta = _decode_prefix(data[at + len(_META_KEY) :].decode().lstrip())[0]
    else:  # error chunks (and anything unusual): decode it all
        chunk = json.loads(data)
        if isinstance(chunk, dict) and "error" in chunk:
            err = chunk["error"]
            raise _ServerError(err.get("message", err) if isinstance(err, dict) else err)
        meta = chunk["meta_info"]
    if not isinstance(meta, dict):
        raise TypeError(f"meta_info is {type(meta).__name__}, not an object")
    return meta


def _finish_type(finish_reason: Any) -> str | None:
    """sglang sends {"type": "length", ...}; accept a bare string too."""
    if isinstance(finish_reason, dict):
        kind = finish_reason.get("type")
        return str(kind) if kind is not None else None
    return str(finish_reason) if finish_reason is not None else None


def _abort_message(finish_reason: Any) -> str:
    if isinstance(finish_reason, dict) and finish_reason.get("message"):
        return f"aborted by server: {finish_reason['message']}"
    return "aborted by server"


def _unless(done: bool, message: str) -> str | None:
    """Trouble after [DONE] (while draining the connection) does not fail the request."""
    return None if done else message


def _number(meta: dict[str, Any] | None, key: str, cast: type[_N]) -> _N | None:
    try:
        value = meta.get(key) if meta else None
        return cast(value) if value is not None else None
    except (TypeError, ValueError):
        return None


async def stream_generate(
    session: aiohttp.ClientSession,
    base_url: str,
    input_ids: list[int],
    output_len: int,
    index: int,
    timeout_s: float,
) -> RequestRecord:
    """Send one greedy, ignore-eos request and record when each token arrived."""
    payload = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }
    url = f"{base_url.rstrip('/')}/generate"
    chunk_times: list[float] = []
    chunk_tokens: list[int] = []
    meta: dict[str, Any] | None = None
    seen_tokens = 0
    error: str | None = None
    end: float | None = None
    done = False

    start = perf_counter()
    try:
        async with session.post(
            url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                body = await resp.content.read(_ERROR_BODY_CHARS)
                detail = body.decode("utf-8", "replace").strip() or resp.reason or ""
                error = f"HTTP {resp.status}: {detail}"
            else:
                # Read to EOF even after [DONE], so the connection can be reused.
                async for line in resp.content:
                    if not line.startswith(b"data:"):
                        continue  # blank separators, SSE comments
                    now = perf_counter()
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done, end = True, now
                        continue
                    if done or error is not None:
                        continue
                    try:
                        info = _parse_meta(data)
                    except _ServerError as exc:
                        error, end = f"server error in stream: {exc}", now
                        continue
                    total = int(info["completion_tokens"])
                    meta = info
                    if total > seen_tokens:
                        chunk_times.append(now)
                        chunk_tokens.append(total - seen_tokens)
                        seen_tokens = total
    except TimeoutError:
        error = error or _unless(done, f"timeout after {timeout_s:g}s")
    except aiohttp.ClientError as exc:
        error = error or _unless(done, f"connection error: {type(exc).__name__}: {exc}")
    except (ValueError, KeyError, TypeError) as exc:
        error = error or _unless(done, f"malformed stream: {type(exc).__name__}: {exc}")
    except Exception as exc:  # any other single-request failure must not kill the level
        error = error or _unless(done, f"unexpected {type(exc).__name__}: {exc}")
    if end is None:
        end = perf_counter()

    finish = meta.get("finish_reason") if meta else None
    finish_type = _finish_type(finish)
    if error is None:
        if finish_type == "abort":
            error = _abort_message(finish)
        elif not done and finish_type is None:
            error = "stream ended before the request finished (no [DONE])"

    return RequestRecord(
        index=index,
        start=start,
        end=end,
        chunk_times=tuple(chunk_times),
        chunk_tokens=tuple(chunk_tokens),
        prompt_tokens=_number(meta, "prompt_tokens", int) or len(input_ids),
        output_tokens=seen_tokens if error is None else 0,
        finish_reason=finish_type,
        spec_verify_ct=_number(meta, "spec_verify_ct", int),
        spec_accept_length=_number(meta, "spec_accept_length", float),
        error=error,
    )
