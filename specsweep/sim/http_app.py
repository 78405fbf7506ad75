"""sglang's HTTP API on aiohttp: native /generate, OpenAI completions, health and info.

Shapes follow sglang's http_server.py so that specsweep's client, health waiting and
metadata collection run unchanged against a real server: SSE ``data: {json}\\n\\n``
chunks ending in ``data: [DONE]``, cumulative ``text`` in native streaming, text deltas
in OpenAI streaming, per-request speculative metrics in ``meta_info``, 503 from
``/health`` until the warmup is over.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from specsweep.sim.engine import Engine, SimRequest, token_text

DEFAULT_CONTEXT_LENGTH = 131072
_FLUSH_MSG = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running "
    "or waiting requests, the operation will not be performed.)\n"
)


class ServerState:
    """What the handlers share: resolved args, the engine and the readiness status."""

    def __init__(
        self, args: dict[str, Any], engine: Engine, version: str, health_seconds: float
    ) -> None:
        self.args = args
        self.engine = engine
        self.version = version
        self.health_seconds = health_seconds
        self.status = "starting"  # -> "up" after warmup, "shutting_down" on SIGTERM
        self.extra_info: dict[str, Any] = {}

    @property
    def model_name(self) -> str:
        return str(self.args["served_model_name"])


STATE_KEY = web.AppKey("sim_state", ServerState)


class BadRequest(ValueError):
    """A request the server rejects with 400."""


def count_text_tokens(text: str) -> int:
    """Rough token count of a prompt: words, or chars/4 for long words."""
    return max(1, len(text.split()), round(len(text) / 4))


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _prompt_tokens(prompt: Any, what: str) -> int:
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        return _prompt_tokens(prompt[0], what)
    raise BadRequest(f"{what} must be a string or a list of token ids (no batches here)")


def _int_param(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _new_request(state: ServerState, prompt_tokens: int, max_new: int, stream: bool) -> SimRequest:
    limit = state.args.get("context_length") or DEFAULT_CONTEXT_LENGTH
    if prompt_tokens + max_new > limit:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {limit} "
            f"tokens. You requested a total of {prompt_tokens + max_new} tokens: "
            f"{prompt_tokens} tokens from the input messages and {max_new} tokens for the "
            "completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit."
        )
    return SimRequest(
        prompt_tokens=prompt_tokens,
        max_new_tokens=max_new,
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
    if state.engine.spec is not None:
        info["spec_verify_ct"] = req.spec_verify_ct
        if req.spec_verify_ct:
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


async def _updates(state: ServerState, req: SimRequest) -> AsyncIterator[tuple[list[int], bool]]:
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


async def _run(state: ServerState, req: SimRequest) -> list[int] | None:
    """Generate to the end; None when the server stopped first. Always releases the slot."""
    state.engine.submit(req)
    ids: list[int] = []
    try:
        async for chunk, _final in _updates(state, req):
            ids.extend(chunk)
    except ConnectionError:
        return None
    finally:
        state.engine.abort(req)
    return ids


def _shutting_down() -> web.Response:
    return _error("request aborted: the server is shutting down", 503)


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the JSON body must be an object")
    return body


async def _sse_response(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    return resp


async def generate(request: web.Request) -> web.StreamResponse:
    """POST /generate: sglang's native API."""
    state = request.app[STATE_KEY]
    try:
        body = await _json_body(request)
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        if body.get("input_ids") is not None:
            prompt_tokens = _prompt_tokens(body["input_ids"], "input_ids")
        elif body.get("text") is not None:
            prompt_tokens = _prompt_tokens(body["text"], "text")
        else:
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        max_new = _int_param(sp.get("max_new_tokens"), "max_new_tokens", 128)
        req = _new_request(state, prompt_tokens, max_new, bool(body.get("stream")))
    except BadRequest as exc:
        return _error(str(exc))
    if max_new == 0:
        req.finished = True
        req.created = req.finish_time = asyncio.get_running_loop().time()
        return web.json_response(
            {"text": "", "output_ids": [], "meta_info": meta_info(state, req, True)}
        )
    if not req.stream:
        ids = await _run(state, req)
        if ids is None:
            return _shutting_down()
        text = "".join(token_text(t) for t in ids)
        return web.json_response(
            {"text": text, "output_ids": ids, "meta_info": meta_info(state, req, True)}
        )
    resp = await _sse_response(request)
    state.engine.submit(req)
    text = ""
    try:
        async for ids, final in _updates(state, req):
            text += "".join(token_text(t) for t in ids)
            chunk = {"text": text, "output_ids": ids, "meta_info": meta_info(state, req, final)}
            await resp.write(_sse(chunk))
        await resp.write(b"data: [DONE]\n\n")
    except ConnectionError:
        pass  # client went away or server stopping: abort below, nothing left to send
    finally:
        state.engine.abort(req)
    return resp


def _openai_prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    if not chat:
        if "prompt" not in body:
            raise BadRequest("prompt is required")
        return _prompt_tokens(body["prompt"], "prompt")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    total = 0
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        total += 4 + (count_text_tokens(content) if isinstance(content, str) else 0)
    return total


async def openai_completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions and /v1/chat/completions (n = 1)."""
    state = request.app[STATE_KEY]
    chat = request.path.endswith("/chat/completions")
    try:
        body = await _json_body(request)
        prompt_tokens = _openai_prompt_tokens(body, chat)
        key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
        max_new = _int_param(body.get(key), key, 16 if not chat else 1024)
        if (body.get("n") or 1) != 1:
            raise BadRequest("only n = 1 is supported by the simulator")
        req = _new_request(state, prompt_tokens, max(max_new, 1), bool(body.get("stream")))
    except BadRequest as exc:
        return web.json_response(
            {"error": {"message": str(exc), "type": "BadRequestError", "code": 400}}, status=400
        )
    model = body.get("model") or state.model_name
    created = int(time.time())
    kind = "chat.completion" if chat else "text_completion"
    base = {"id": req.rid, "object": kind, "created": created, "model": model}
    if not req.stream:
        ids = await _run(state, req)
        if ids is None:
            return _shutting_down()
        text = "".join(token_text(t) for t in ids)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return web.json_response({**base, "choices": [choice], "usage": _usage(req)})
    resp = await _sse_response(request)
    state.engine.submit(req)
    chunk_kind = "chat.completion.chunk" if chat else "text_completion"
    base["object"] = chunk_kind
    try:
        if chat:
            delta = {"role": "assistant", "content": ""}
            first = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            await resp.write(_sse({**base, "choices": [first], "usage": None}))
        async for ids, final in _updates(state, req):
            text = "".join(token_text(t) for t in ids)
            choice = {"index": 0, "logprobs": None, "finish_reason": "length" if final else None}
            if chat:
                choice["delta"] = {"content": text}
            else:
                choice["text"] = text
            choice["matched_stop"] = None
            await resp.write(_sse({**base, "choices": [choice], "usage": None}))
        opts = body.get("stream_options") or {}
        if isinstance(opts, dict) and opts.get("include_usage"):
            await resp.write(_sse({**base, "choices": [], "usage": _usage(req)}))
        await resp.write(b"data: [DONE]\n\n")
    except ConnectionError:
        pass
    finally:
        state.engine.abort(req)
    return resp


def _usage(req: SimRequest) -> dict[str, Any]:
    total = req.prompt_tokens + req.completion_tokens
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.completion_tokens,
        "total_tokens": total,
        "prompt_tokens_details": None,
    }


async def health(request: web.Request) -> web.Response:
    """GET /health and /health_generate: 503 until warmed up, then a short generation."""
    state = request.app[STATE_KEY]
    if state.status != "up":
        return web.Response(status=503)
    await asyncio.sleep(state.health_seconds)
    return web.Response(status=200) if state.status == "up" else web.Response(status=503)


async def server_info(request: web.Request) -> web.Response:
    """GET /server_info and /get_server_info: resolved args, version, internal states."""
    state = request.app[STATE_KEY]
    engine = state.engine
    internal: dict[str, Any] = {
        "last_gen_throughput": engine.last_gen_throughput,
        "effective_max_running_requests": engine.max_running_requests,
        "num_running_reqs": len(engine.running),
        "num_waiting_reqs": len(engine.waiting),
    }
    if engine.spec is not None:
        internal["avg_spec_accept_length"] = engine.avg_spec_accept_length
    info = {
        **state.args,
        "max_total_num_tokens": engine.max_total_num_tokens,
        "max_req_input_len": (state.args.get("context_length") or DEFAULT_CONTEXT_LENGTH) - 1,
        "internal_states": [internal],
        "version": state.version,
        "simulated": True,
        **state.extra_info,
    }
    return web.json_response(info)


async def model_info(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    return web.json_response(
        {
            "model_path": state.args["model_path"],
            "tokenizer_path": state.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
        }
    )


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    card = {
        "id": state.model_name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": state.model_name,
        "max_model_len": state.args.get("context_length") or DEFAULT_CONTEXT_LENGTH,
    }
    return web.json_response({"object": "list", "data": [card]})


async def flush_cache(request: web.Request) -> web.Response:
    """GET/POST /flush_cache: only when idle; resets the lifetime accept length."""
    engine = request.app[STATE_KEY].engine
    if not engine.is_idle:
        return web.Response(status=400, text=_FLUSH_MSG)
    engine.reset_stats()
    return web.Response(status=200, text=_FLUSH_MSG)


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics (Prometheus text) with --enable-metrics, like sglang."""
    state = request.app[STATE_KEY]
    if not state.args.get("enable_metrics"):
        return web.Response(status=404, text="Not Found")
    e = state.engine
    label = f'{{model_name="{state.model_name}"}}'
    values = {
        "num_running_reqs": ("gauge", len(e.running)),
        "num_queue_reqs": ("gauge", len(e.waiting)),
        "gen_throughput": ("gauge", e.last_gen_throughput),
        "token_usage": ("gauge", e.token_usage()),
        "spec_accept_length": ("gauge", e.avg_spec_accept_length),
        "prompt_tokens_total": ("counter", e.prompt_tokens_total),
        "generation_tokens_total": ("counter", e.generation_tokens_total),
    }
    lines = []
    for name, (kind, value) in values.items():
        lines += [f"# TYPE sglang:{name} {kind}", f"sglang:{name}{label} {float(value)}"]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


class UvicornStyleAccessLogger(AbstractAccessLogger):
    """Access lines like uvicorn's: ``INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK``."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "-"
        try:
            phrase = HTTPStatus(response.status).phrase
        except ValueError:
            phrase = ""
        version = f"{request.version.major}.{request.version.minor}"
        self.logger.info(
            f'INFO:     {addr} - "{request.method} {request.path_qs} HTTP/{version}" '
            f"{response.status} {phrase}"
        )


def build_app(state: ServerState) -> web.Application:
    """The aiohttp application with sglang's routes."""
    app = web.Application(client_max_size=64 * 1024**2)
    app[STATE_KEY] = state
    r = app.router
    r.add_post("/generate", generate)
    r.add_post("/v1/completions", openai_completions)
    r.add_post("/v1/chat/completions", openai_completions)
    for path in ("/health", "/health_generate"):
        r.add_get(path, health)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, server_info)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, model_info)
    r.add_get("/v1/models", list_models)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_route("POST", "/flush_cache", flush_cache)
    r.add_get("/metrics", metrics)
    return app
