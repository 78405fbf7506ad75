"""sglang's HTTP API on aiohttp: the routes, and the native ``/generate``.

The handlers live in three modules: this one (``/generate`` and the route table),
``http_openai`` (``/v1/completions``, ``/v1/chat/completions``) and ``http_admin``
(health, readiness, info, cache, metrics); what they share is in ``http_common``.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from specsweep.sim.engine import token_text
from specsweep.sim.faults import error_body
from specsweep.sim.http_admin import (
    UvicornStyleAccessLogger,
    flush_cache,
    health,
    list_models,
    metrics,
    model_info,
    ready,
    retrieve_model,
    server_info,
)
from specsweep.sim.http_common import (
    RANDOM,
    SHUTTING_DOWN,
    STATE_KEY,
    BadRequest,
    ServerState,
    bad_request,
    int_param,
    json_body,
    meta_info,
    native_error,
    new_request,
    parse_prompt,
    prompt_tokens,
    run_to_end,
    sse,
    sse_response,
    updates,
)
from specsweep.sim.http_openai import openai_completions

__all__ = ["STATE_KEY", "ServerState", "UvicornStyleAccessLogger", "build_app"]


async def generate(request: web.Request) -> web.StreamResponse:
    """POST /generate: sglang's native API."""
    state = request.app[STATE_KEY]
    try:
        body = await json_body(request)
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        if body.get("input_ids") is not None:
            n_prompt, category = prompt_tokens(body["input_ids"], "input_ids"), RANDOM
        elif body.get("text") is not None:
            n_prompt, category = parse_prompt(body["text"], "text")
        else:
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        max_new = int_param(sp.get("max_new_tokens"), "max_new_tokens", 128)
        req = new_request(state, n_prompt, max_new, bool(body.get("stream")), category)
    except BadRequest as exc:
        return bad_request(exc, openai=False)
    status = state.faults.error_status() if state.faults else None
    if status is not None:
        return web.json_response(error_body(status, openai=False), status=status)
    if max_new == 0:
        req.finished = True
        req.created = req.finish_time = asyncio.get_running_loop().time()
        state.request_done()
        return web.json_response(
            {"text": "", "output_ids": [], "meta_info": meta_info(state, req, True)}
        )
    if not req.stream:
        ids = await run_to_end(state, req)
        if ids is None:
            return native_error(SHUTTING_DOWN, 503)
        text = "".join(token_text(t) for t in ids)
        return web.json_response(
            {"text": text, "output_ids": ids, "meta_info": meta_info(state, req, True)}
        )
    resp = await sse_response(request)
    state.engine.submit(req)
    drop = state.faults.drop_stream() if state.faults else False
    text = ""
    try:
        async for ids, final in updates(state, req):
            text += "".join(token_text(t) for t in ids)
            chunk = {"text": text, "output_ids": ids, "meta_info": meta_info(state, req, final)}
            await resp.write(sse(chunk))
            if drop and not final:
                if request.transport is not None:
                    request.transport.abort()  # mid-stream: no final chunk, no [DONE]
                return resp
        await resp.write(b"data: [DONE]\n\n")
        state.request_done()
    except ConnectionError:
        pass  # client went away or server stopping: abort below, nothing left to send
    finally:
        state.engine.abort(req)
    return resp


def build_app(state: ServerState) -> web.Application:
    """The aiohttp application with sglang's routes."""
    app = web.Application(client_max_size=64 * 1024**2)
    app[STATE_KEY] = state
    r = app.router
    for method in ("POST", "PUT"):
        r.add_route(method, "/generate", generate)
    r.add_post("/v1/completions", openai_completions)
    r.add_post("/v1/chat/completions", openai_completions)
    for path in ("/health", "/health_generate"):
        r.add_get(path, health)
    r.add_get("/ready", ready)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, server_info)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, model_info)
    r.add_get("/v1/models", list_models)
    r.add_get("/v1/models/{model:.+}", retrieve_model)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_route("POST", "/flush_cache", flush_cache)
    r.add_get("/metrics", metrics)
    return app
