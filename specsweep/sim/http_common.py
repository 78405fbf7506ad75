"""What sglang's HTTP handlers share: server state, request parsing, meta_info, SSE.

Shapes follow sglang's ``http_server.py`` so that specsweep's client, health waiting
and metadata collection run unchanged against a real server: SSE ``data: {json}\n\n``
chunks ending in ``data: [DONE]``, per-request speculative metrics in ``meta_info``,
``{"error": {"message"}}`` on the native API and OpenAI's ErrorResponse on ``/v1``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from specsweep.sim.engine import Engine, SimRequest
from specsweep.sim.faults import Faults
from specsweep.workloads.categories import RANDOM, category_of  # RANDOM: token ids
from specsweep.workloads.tokens import estimate_tokens

DEFAULT_CONTEXT_LENGTH = 131072  # PerfProfile.context_length's default


class ServerState:
    """What the handlers share: resolved args, the engine, readiness and faults."""

    def __init__(
        self,
        args: dict[str, Any],
        engine: Engine,
        version: str,
        health_seconds: float,
        faults: Faults | None = None,
    ) -> None:
        self.args = args
        self.engine = engine
        self.version = version
        self.health_seconds = health_seconds
        self.faults = faults
        self.status = "starting"  # -> "up" after warmup, "shutting_down" on SIGTERM
        self.extra_info: dict[str, Any] = {}

    @property
    def model_name(self) -> str:
        return str(self.args["served_model_name"])

    @property
    def context_length(self) -> int:
        """The model's context length as sglang resolves it: ``--context-length`` when
        given, else the model's (the profile's)."""
        return int(self.args.get("context_length") or self.engine.profile.context_length)

    def request_done(self) -> None:
        if self.faults is not None:
            self.faults.request_done()


STATE_KEY = web.AppKey("sim_state", ServerState)


class BadRequest(ValueError):
    """A request the server rejects with 400. ``validation``: the body did not even
    parse (FastAPI's validation error, which sglang answers with an ErrorResponse on
    every route); otherwise sglang's own check failed."""

    def __init__(self, message: str, validation: bool = False) -> None:
        super().__init__(message)
        self.validation = validation


def count_text_tokens(text: str) -> int:
    """Rough token count of a prompt: words, or chars/4 for long words (the load
    generator's estimate, ``specsweep.workloads.estimate_tokens``)."""
    return estimate_tokens(text)


def text_category(text: str) -> str:
    """Which kind of text a prompt is, for acceptance: a bundled prompt's category,
    ``random`` for random words, ``text`` otherwise (``specsweep.workloads.category_of``)."""
    return category_of(text)


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def prompt_tokens(prompt: Any, what: str) -> int:
    return parse_prompt(prompt, what)[0]


def parse_prompt(prompt: Any, what: str) -> tuple[int, str]:
    """Token count and text category of a prompt: text is classified, token ids are
    ``random`` (a client sending ids is sglang's random-ids benchmark)."""
    if isinstance(prompt, str):
        return count_text_tokens(prompt), text_category(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt), RANDOM
    if isinstance(prompt, list) and len(prompt) == 1:
        return parse_prompt(prompt[0], what)
    raise BadRequest(f"{what} must be a string or a list of token ids (no batches here)")


def int_param(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{name} must be a non-negative integer, got {value!r}")
    return value


def new_request(
    state: ServerState, n_prompt: int, max_new: int, stream: bool, category: str = RANDOM
) -> SimRequest:
    limit = state.context_length
    if n_prompt + max_new > limit:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {limit} "
            f"tokens. You requested a total of {n_prompt + max_new} tokens: "
            f"{n_prompt} tokens from the input messages and {max_new} tokens for the "
            "completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit."
        )
    return SimRequest(
        prompt_tokens=n_prompt,
        max_new_tokens=max_new,
        category=category,
        stream=stream,
        stream_interval=int(state.args.get("stream_interval") or 1),
    )


def meta_info(state: ServerState, req: SimRequest, final: bool) -> dict[str, Any]:
    """sglang's meta_info for a chunk (cumulative counts; latency and rates when done)."""
    n = req.completion_tokens
    info: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish_reason() if final else None,
        "prompt_tokens": req.prompt_tokens,
        "weight_version": "default",
        "completion_tokens": n,
        "cached_tokens": 0,
    }
    spec = state.engine.spec
    if spec is not None:
        info["spec_verify_ct"] = req.spec_verify_ct
        if req.spec_correct_drafts_histogram:  # sglang 0.5.23 sends it once a step verified
            info["spec_correct_drafts_histogram"] = list(req.spec_correct_drafts_histogram)
        # sglang's tokenizer manager reports the rates only when drafts were proposed:
        # an adaptive server started at steps 0 (1 draft token) reports neither.
        if req.spec_verify_ct and spec.num_draft_tokens > 1:
            info["spec_accept_length"] = n / req.spec_verify_ct
            if final:
                proposed = req.spec_proposed_drafts
                info["spec_accept_rate"] = req.spec_correct_drafts / proposed if proposed else 0.0
                info["spec_num_correct_drafts"] = req.spec_correct_drafts
                info["spec_num_proposed_drafts"] = proposed
    if final:
        end = req.finish_time or asyncio.get_running_loop().time()
        info["e2e_latency"] = end - req.created
    return info


async def updates(state: ServerState, req: SimRequest) -> AsyncIterator[tuple[list[int], bool]]:
    """Yield (new token ids, is_final) each time the scheduler publishes progress."""
    sent = 0
    while True:
        await req.event.wait()
        req.event.clear()
        if req.aborted:
            raise ConnectionAbortedError("request aborted (server shutting down)")
        n = len(req.output_ids)
        final = req.finished
        if n > sent or final:
            ids = req.output_ids[sent:n]
            sent = n
            yield ids, final
        if final:
            return


async def run_to_end(state: ServerState, req: SimRequest) -> list[int] | None:
    """Generate to the end; None when the server stopped first. Always releases the slot."""
    state.engine.submit(req)
    ids: list[int] = []
    try:
        async for chunk, _final in updates(state, req):
            ids.extend(chunk)
    except ConnectionError:
        return None
    finally:
        state.engine.abort(req)
    state.request_done()
    return ids


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or BadRequest."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON body: {exc}", validation=True) from None
    if not isinstance(body, dict):
        raise BadRequest("the JSON body must be an object", validation=True)
    return body


async def sse_response(request: web.Request) -> web.StreamResponse:
    """An open ``text/event-stream`` response."""
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    return resp


def bad_request(exc: BadRequest, openai: bool) -> web.Response:
    """400 in the shape sglang uses for this kind of rejection on this route."""
    if exc.validation:
        return openai_error(str(exc), 400, "Bad Request")
    return openai_error(str(exc)) if openai else native_error(str(exc))


def native_error(message: str, status: int = 400) -> web.Response:
    """sglang's native error: ``{"error": {"message": ...}}``."""
    return web.json_response({"error": {"message": message}}, status=status)


def openai_error(message: str, status: int = 400, kind: str = "BadRequestError") -> web.Response:
    """sglang's OpenAI-compatible ErrorResponse."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


SHUTTING_DOWN = "request aborted: the server is shutting down"
