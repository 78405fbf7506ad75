"""The request bodies of a level, built and encoded before any clock starts.

Every request is greedy (temperature 0), streamed, and asks for its output
length with ``ignore_eos`` so the output length is the one configured; an early
stop is still recorded with its finish reason. The OpenAI bodies follow sglang's
bench_serving (``max_tokens``, ``ignore_eos``), plus ``stream_options`` asking
for usage, so token counts come from the server.

What a request carries depends on the load's prompts:

* random: token ids on /generate, random words on the text endpoints, all of
  ``load.input_len`` tokens (category ``random``);
* the bundled set or a JSONL/ShareGPT file: the next record of a fixed shuffle that
  holds the categories in proportion along its length (``prompts.stratified_order``:
  every pass sends the workload's mix; the passes of a level take consecutive slices,
  the warmup the far end), fitted
  to ``load.input_len`` (``prompt_length: fit``) or as it is (``natural``, where a
  record's own ``output_len`` wins); category: the record's;
* a replay: the records in file order, cycling, each at its recorded input and
  output length (its text when it has one, else random ids or words).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson

from specsweep.config import LoadSpec
from specsweep.loadgen.client import PreparedRequest
from specsweep.loadgen.http import build_request, split_url
from specsweep.loadgen.prompts import (
    level_seed,
    make_input_ids,
    make_text_prompts,
    pick_in_order,
    pick_shuffled,
    random_ids,
    random_words,
)
from specsweep.workloads import PromptRecord, estimate_tokens, fit_prompt, resolve_workload
from specsweep.workloads.categories import RANDOM

logger = logging.getLogger(__name__)

ENDPOINT_PATHS = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}
FALLBACK_MODEL = "default"


class RequestFactory:
    """Builds the warmup and the measured passes of one level for one endpoint."""

    def __init__(
        self, base_url: str, concurrency: int, load: LoadSpec, model: str | None = None
    ) -> None:
        self.host, self.port, prefix = split_url(base_url)
        self.endpoint = load.resolved_endpoint()
        self.path = prefix + ENDPOINT_PATHS[self.endpoint]
        self.load = load
        self.concurrency = concurrency
        self.model = model or FALLBACK_MODEL
        self.workload = resolve_workload(load)
        self.replay = self.workload is not None and self.workload.kind == "replay"
        n = load.num_requests(concurrency)
        records = self.workload.records if self.workload is not None else ()
        # every pass holds the categories in proportion (drift.yield_variance relies on it)
        self._strata = [r.category for r in records]
        texts = sum(r.text is not None for r in records)
        if texts and len(records) < n * load.repeats:
            logger.warning(
                "c=%d: %s has %d prompts for %d requests per pass: prompts repeat, and "
                "repeated prompts may be served from the prefix cache",
                concurrency,
                self.workload.label if self.workload is not None else "the workload",
                len(records),
                n,
            )

    def warmup(self) -> list[PreparedRequest]:
        """The warm-in: ``load.num_warmup`` requests whose last C ask for 1/C, 2/C, ... C/C
        of their output length (``load.phases`` "spread", the default; "together": all at
        full length), so the streams finish them one after another and enter the first
        pass at phases spread over a request, as a server's users do. Started
        together on a length each, the streams would all end their first requests in
        one wave (a deterministic server keeps that lockstep for good, a speculative one
        for several requests), and a pass would measure the wave, not the steady state
        (docs/metrics.md)."""
        n = self.load.num_warmup(self.concurrency)
        seed = level_seed(self.load.seed, self.concurrency, warmup=True)
        if self.workload is None:
            requests = self._random(n, seed)
        else:
            records = self.workload.records  # the end of the level's order, far from passes
            if self.replay:
                picked = pick_in_order(records, n, len(records) - n)
            else:
                order = level_seed(self.load.seed, self.concurrency)
                picked = pick_shuffled(records, order, n, len(records) - n, self._strata)
            requests = self._build(picked, seed)
        if self.load.phases == "together":
            return requests
        return stagger(requests, self.concurrency, self.load.output_len, self._shorter)

    def measured(self, repeat: int) -> list[PreparedRequest]:
        n = self.load.num_requests(self.concurrency)
        seed = level_seed(self.load.seed, self.concurrency, repeat=repeat)
        if self.workload is None:
            return self._random(n, seed)
        records = self.workload.records
        if self.replay:
            return self._build(pick_in_order(records, n, repeat * n), seed)
        order = level_seed(self.load.seed, self.concurrency)
        return self._build(pick_shuffled(records, order, n, repeat * n, self._strata), seed)

    def _shorter(self, request: PreparedRequest, output_len: int) -> PreparedRequest:
        """The same request asking for ``output_len`` tokens (its body re-encoded)."""
        body = orjson.loads(request.wire.split(b"\r\n\r\n", 1)[1])
        if "sampling_params" in body:
            body["sampling_params"]["max_new_tokens"] = output_len
        else:
            body["max_tokens"] = output_len
        wire = build_request(self.host, self.port, self.path, orjson.dumps(body))
        return replace(request, wire=wire, output_len=output_len)

    def _random(self, n: int, seed: int) -> list[PreparedRequest]:
        input_len = self.load.input_len
        prompts: list[list[int]] | list[str]
        if self.endpoint == "generate":
            prompts = make_input_ids(n, input_len, seed)
        else:
            prompts = make_text_prompts(n, input_len, seed)
        return [self.prepare(p, None, RANDOM, input_len) for p in prompts]

    def _build(self, records: list[PromptRecord], seed: int) -> list[PreparedRequest]:
        rng = random.Random(seed)  # the filler of fitted prompts, a replay's random prompts
        return [self._from_record(r, rng) for r in records]

    def _from_record(self, record: PromptRecord, rng: random.Random) -> PreparedRequest:
        load = self.load
        if self.replay:
            assert record.input_len is not None and record.output_len is not None
            prompt: list[int] | str
            if record.text is not None:
                prompt = record.text
            elif self.endpoint == "generate":
                prompt = random_ids(rng, record.input_len)
            else:
                prompt = random_words(rng, record.input_len)
            category = record.category or (None if record.text else RANDOM)
            return self.prepare(prompt, record.output_len, category, record.input_len)
        assert record.text is not None and self.workload is not None
        if load.prompt_length == "fit":
            text = fit_prompt(record.text, load.input_len, self.workload, rng)
            return self.prepare(text, load.output_len, record.category)
        return self.prepare(record.text, record.output_len or load.output_len, record.category)

    def prepare(
        self,
        prompt: list[int] | str,
        output_len: int | None = None,
        category: str | None = None,
        prompt_tokens: int | None = None,
    ) -> PreparedRequest:
        """One request's encoded bytes: `prompt` asking for `output_len` tokens (default:
        the load's); prompt_tokens defaults to the ids' count or the text's estimate."""
        endpoint = self.endpoint
        out = self.load.output_len if output_len is None else output_len
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
        if prompt_tokens is None:
            prompt_tokens = len(prompt) if isinstance(prompt, list) else estimate_tokens(prompt)
        wire = build_request(self.host, self.port, self.path, orjson.dumps(body))
        return PreparedRequest(
            endpoint=endpoint,
            wire=wire,
            prompt_tokens=prompt_tokens,
            category=category,
            output_len=out,
        )


def stagger(
    requests: list[PreparedRequest],
    concurrency: int,
    default_len: int,
    shorten: Callable[[PreparedRequest, int], PreparedRequest],
) -> list[PreparedRequest]:
    """The last ``concurrency`` requests asking for (j + 1) / C of their output length
    (j = 0 .. C-1; at least one token): their bytes rebuilt with the shorter length."""
    spread = requests[-concurrency:] if concurrency > 0 else []
    head = requests[: len(requests) - len(spread)]
    out = list(head)
    for j, request in enumerate(spread):
        full = request.output_len or default_len
        length = max(1, math.ceil(full * (j + 1) / len(spread)))
        out.append(request if length == full else shorten(request, length))
    return out


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
