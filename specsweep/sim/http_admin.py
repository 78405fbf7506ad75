"""sglang's health, readiness, info, cache and metrics endpoints, and its access log."""

from __future__ import annotations

import asyncio
import time
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from specsweep.sim.http_common import STATE_KEY

_FLUSH_MSG = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running "
    "or waiting requests, the operation will not be performed.)\n"
)


async def health(request: web.Request) -> web.Response:
    """GET /health and /health_generate: 503 until warmed up, then a short generation.

    sglang answers only after its one-token generation comes back (about a second:
    it polls once a second), so the probe costs ``health_seconds``; a flapping server
    (SPECSWEEP_SIM_HEALTH_FLAP) alternates 200 and 503 after that."""
    state = request.app[STATE_KEY]
    if state.status != "up":
        return web.Response(status=503)
    await asyncio.sleep(state.health_seconds)
    if state.status != "up":
        return web.Response(status=503)
    ok = state.faults.health_ok() if state.faults else True
    return web.Response(status=200 if ok else 503)


async def ready(request: web.Request) -> web.Response:
    """GET /ready: the cheap readiness check of newer sglang (no generation)."""
    state = request.app[STATE_KEY]
    return web.Response(status=200 if state.status == "up" else 503)


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
        "max_req_input_len": state.context_length - 1,
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


def _model_card(state: Any, model: str) -> dict[str, Any]:
    """sglang's ModelCard (``srt/entrypoints/openai/protocol.py``): ``max_model_len`` is
    the model config's ``context_len``, i.e. ``--context-length`` or the model's."""
    return {
        "id": model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": model,
        "parent": None,
        "max_model_len": state.context_length,
    }


async def list_models(request: web.Request) -> web.Response:
    """GET /v1/models: the served model (no LoRA adapters here)."""
    state = request.app[STATE_KEY]
    return web.json_response({"object": "list", "data": [_model_card(state, state.model_name)]})


async def retrieve_model(request: web.Request) -> web.Response:
    """GET /v1/models/{model}: its card, or sglang's 404 for another name."""
    state = request.app[STATE_KEY]
    model = request.match_info["model"]
    if model != state.model_name:
        error = {
            "message": f"The model '{model}' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
        return web.json_response({"error": error}, status=404)
    return web.json_response(_model_card(state, model))


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
