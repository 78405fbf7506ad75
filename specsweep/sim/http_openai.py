"""sglang's OpenAI-compatible endpoints: ``/v1/completions`` and ``/v1/chat/completions``.

Streaming sends text deltas (not cumulative text), ``finish_reason`` on the last
choice chunk, a usage chunk only with ``stream_options.include_usage``, then
``data: [DONE]``; errors are OpenAI's flat ErrorResponse, as sglang's serving classes
return them.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from specsweep.sim.engine import SimRequest, token_text
from specsweep.sim.faults import error_body
from specsweep.sim.http_common import (
    SHUTTING_DOWN,
    STATE_KEY,
    BadRequest,
    bad_request,
    count_text_tokens,
    int_param,
    json_body,
    new_request,
    openai_error,
    parse_prompt,
    run_to_end,
    sse,
    sse_response,
    text_category,
    updates,
)


def _prompt(body: dict[str, Any], chat: bool) -> tuple[int, str]:
    """Prompt tokens and text category: the prompt's, or for chat the messages' tokens
    (4 per message for the template) and the last user message's category."""
    if not chat:
        if "prompt" not in body:
            raise BadRequest("prompt is required")
        return parse_prompt(body["prompt"], "prompt")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    total = 0
    last_user: str | None = None
    for msg in messages:
        content = _content_text(msg.get("content")) if isinstance(msg, dict) else None
        total += 4 + (count_text_tokens(content) if content else 0)
        if content and msg.get("role") == "user":
            last_user = content
    return total, "text" if last_user is None else text_category(last_user)


def _content_text(content: Any) -> str | None:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str)) or None
    return None


def _usage(req: SimRequest) -> dict[str, Any]:
    total = req.prompt_tokens + req.completion_tokens
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.completion_tokens,
        "total_tokens": total,
        "prompt_tokens_details": None,
    }


async def openai_completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions and /v1/chat/completions (n = 1)."""
    state = request.app[STATE_KEY]
    chat = request.path.endswith("/chat/completions")
    try:
        body = await json_body(request)
        n_prompt, category = _prompt(body, chat)
        key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
        max_new = int_param(body.get(key), key, 16 if not chat else 1024)
        if (body.get("n") or 1) != 1:
            raise BadRequest("only n = 1 is supported by the simulator")
        stream = bool(body.get("stream"))
        req = new_request(state, n_prompt, max(max_new, 1), stream, category)
    except BadRequest as exc:
        return bad_request(exc, openai=True)
    status = state.faults.error_status() if state.faults else None
    if status is not None:
        return web.json_response(error_body(status, openai=True), status=status)
    model = body.get("model") or state.model_name
    kind = "chat.completion" if chat else "text_completion"
    base = {"id": req.rid, "object": kind, "created": int(time.time()), "model": model}
    if not req.stream:
        ids = await run_to_end(state, req)
        if ids is None:
            return openai_error(SHUTTING_DOWN, 503, "ServiceUnavailableError")
        text = "".join(token_text(t) for t in ids)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return web.json_response({**base, "choices": [choice], "usage": _usage(req)})
    resp = await sse_response(request)
    state.engine.submit(req)
    base["object"] = "chat.completion.chunk" if chat else "text_completion"
    opts = body.get("stream_options") or {}
    opts = opts if isinstance(opts, dict) else {}
    # sglang attaches cumulative usage to every chunk when asked (continuous_usage_stats);
    # a server that ignores the option is a fault to simulate (SPECSWEEP_SIM_NO_CONTINUOUS_USAGE)
    ignored = state.faults is not None and state.faults.knobs.no_continuous_usage
    continuous = bool(opts.get("continuous_usage_stats")) and not ignored
    try:
        if chat:
            delta = {"role": "assistant", "content": ""}
            first = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            await resp.write(sse({**base, "choices": [first], "usage": None}))
        async for ids, final in updates(state, req):
            text = "".join(token_text(t) for t in ids)
            choice = {"index": 0, "logprobs": None, "finish_reason": "length" if final else None}
            if chat:
                choice["delta"] = {"content": text}
            else:
                choice["text"] = text
            choice["matched_stop"] = None
            usage = _usage(req) if continuous else None
            await resp.write(sse({**base, "choices": [choice], "usage": usage}))
        if opts.get("include_usage"):
            await resp.write(sse({**base, "choices": [], "usage": _usage(req)}))
        await resp.write(b"data: [DONE]\n\n")
        state.request_done()
    except ConnectionError:
        pass
    finally:
        state.engine.abort(req)
    return resp
