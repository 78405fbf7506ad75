"""The request bodies of a level, built and encoded before any clock starts.

Every request is greedy (temperature 0), streamed, and asks for exactly
``output_len`` tokens with ``ignore_eos`` so the output length is the one
configured; an early stop is still recorded with its finish reason. The
OpenAI bodies follow sglang's bench_serving (``max_tokens``, ``ignore_eos``),
plus ``stream_options`` asking for usage, so token counts come from the server.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from typing import Any

import orjson

from specsweep.config import LoadSpec
from specsweep.loadgen.client import PreparedRequest
from specsweep.loadgen.http import build_request, split_url
from specsweep.loadgen.prompts import (
    level_seed,
    load_dataset,
    make_input_ids,
    make_text_prompts,
    pick_dataset_prompts,
)

logger = logging.getLogger(__name__)

ENDPOINT_PATHS = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}
FALLBACK_MODEL = "default"


def _estimate_tokens(text: str) -> int:
    """A stand-in until the server reports the real count (whitespace words)."""
    return max(1, len(text.split()))


class RequestFactory:
    """Builds the warmup and the measured passes of one level for one endpoint."""

    def __init__(
        self, base_url: str, concurrency: int, load: LoadSpec, model: str | None = None
    ) -> None:
        self.host, self.port, prefix = split_url(base_url)
        self.path = prefix + ENDPOINT_PATHS[load.endpoint]
        self.load = load
        self.concurrency = concurrency
        self.model = model or FALLBACK_MODEL
        self.dataset = load_dataset(load.dataset) if load.dataset is not None else None
        n = load.num_requests(concurrency)
        if self.dataset is not None and len(self.dataset) < n * load.repeats:
            logger.warning(
                "c=%d: the dataset has %d prompts for %d requests per pass: prompts repeat, "
                "and repeated prompts may be served from the prefix cache",
                concurrency,
                len(self.dataset),
                n,
            )

    def warmup(self) -> list[PreparedRequest]:
        n = self.load.num_warmup(self.concurrency)
        seed = level_seed(self.load.seed, self.concurrency, warmup=True)
        if self.dataset is not None:  # the end of the level's shuffle, far from the passes
            seed = level_seed(self.load.seed, self.concurrency)
            return self._build(pick_dataset_prompts(self.dataset, seed, n, len(self.dataset) - n))
        return self._build(self._random_prompts(n, seed))

    def measured(self, repeat: int) -> list[PreparedRequest]:
        n = self.load.num_requests(self.concurrency)
        if self.dataset is not None:
            seed = level_seed(self.load.seed, self.concurrency)
            return self._build(pick_dataset_prompts(self.dataset, seed, n, repeat * n))
        seed = level_seed(self.load.seed, self.concurrency, repeat=repeat)
        return self._build(self._random_prompts(n, seed))

    def _random_prompts(self, n: int, seed: int) -> list[list[int]] | list[str]:
        if self.load.endpoint == "generate":
            return make_input_ids(n, self.load.input_len, seed)
        return make_text_prompts(n, self.load.input_len, seed)

    def _build(self, prompts: list[list[int]] | list[str]) -> list[PreparedRequest]:
        return [self.prepare(p) for p in prompts]

    def prepare(self, prompt: list[int] | str) -> PreparedRequest:
        endpoint = self.load.endpoint
        out = self.load.output_len
        body: dict[str, Any]
        if endpoint == "generate":
            body = {"input_ids": prompt} if isinstance(prompt, list) else {"text": prompt}
            body["sampling_params"] = {
                "max_new_tokens": out,
                "temperature": 0.0,
                "ignore_eos": True,
            }
            body["stream"] = True
        else:
            assert isinstance(prompt, str)
            body = {"model": self.model}
            if endpoint == "chat":
                body["messages"] = [{"role": "user", "content": prompt}]
            else:
                body["prompt"] = prompt
            body |= {
                "max_tokens": out,
                "temperature": 0.0,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            }
        tokens = len(prompt) if isinstance(prompt, list) else _estimate_tokens(prompt)
        wire = build_request(self.host, self.port, self.path, orjson.dumps(body))
        return PreparedRequest(endpoint=endpoint, wire=wire, prompt_tokens=tokens)


def _get_model(base_url: str, timeout_s: float) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    with opener.open(f"{base_url.rstrip('/')}/v1/models", timeout=timeout_s) as resp:
        data = orjson.loads(resp.read())
    return str(data["data"][0]["id"])


async def discover_model(base_url: str, timeout_s: float = 10.0) -> str:
    """The served model name from /v1/models, which the OpenAI endpoints want in the body."""
    try:
        return await asyncio.to_thread(_get_model, base_url, timeout_s)
    except Exception as exc:  # any failure: the requests themselves will say what is wrong
        logger.warning("could not read the model name from /v1/models (%s); using %r", exc,
                       FALLBACK_MODEL)  # fmt: skip
        return FALLBACK_MODEL
