"""Asyncio continuous-batching scheduler that drives the performance model.

One task plays sglang's scheduler: requests wait in a FIFO queue, each step admits
new ones up to ``max_running_requests`` (their prefill is a step of its own, as in
sglang, and yields their first token), otherwise runs one decode step or speculative
cycle for the whole running batch. Each step costs one ``asyncio.sleep`` of the
model's (scaled) duration whatever the batch size, and deadlines are absolute so the
Python overhead of a step is absorbed instead of added: 256 streams on 2 cores keep
the simulated timing.

Each decode step's cost is evaluated at the running batch's mean context (prompt plus
the tokens generated so far, kept as a running sum: the KV-read term of the perf model),
and each request's accept lengths are sampled from its text category's distribution
(``SimRequest.category``: ``random`` for token ids, the HTTP layer classifies text; one
``AcceptSampler`` per category, all drawing from the one seeded generator).

With ``--speculative-adaptive`` an ``AdaptiveRuntime`` (``specsweep.sim.adaptive_runtime``)
picks each decode cycle's step count from the running batch size before the cycle is
timed, and is fed each cycle's accepted drafts per request afterwards; per-request
counters stay sglang's (every verify counts, steps-0 cycles included, and proposed drafts
use the server's initial ``num_draft_tokens - 1``).

Output tokens are deterministic filler (``token_id_at``/``token_text``), one word
per token, so cumulative text grows like a real detokenizer's.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specsweep.sim.adaptive_runtime import AdaptiveRuntime
from specsweep.sim.perf_model import (
    AcceptSampler,
    PerfProfile,
    SpecConfig,
    decode_step_ms,
    prefill_step_ms,
)

_WORDS = (
    "the", "model", "speculates", "a", "few", "tokens", "and", "verifies", "them",
    "in", "one", "pass", "so", "latency", "drops", "while", "the", "batch", "is",
    "small", "but", "throughput", "suffers", "when", "it", "grows",
)  # fmt: skip
_TOKEN_BASE = 1000
_TOKEN_SPAN = 30000
MAX_LAG_S = 0.25  # a step loop further behind than this forgets its debt


def token_id_at(position: int) -> int:
    """Deterministic output token id at a position of the completion."""
    return _TOKEN_BASE + (position * 7919 + 13) % _TOKEN_SPAN


def token_text(token_id: int) -> str:
    """Filler text of one token: a leading space and a word."""
    return " " + _WORDS[token_id % len(_WORDS)]


def _count(histogram: list[int], k: int) -> None:
    """One more verify step that accepted `k` drafts (sglang's
    update_spec_correct_drafts_histogram: the list grows to fit)."""
    if len(histogram) <= k:
        histogram.extend([0] * (k - len(histogram) + 1))
    histogram[k] += 1


@dataclass(eq=False)
class SimRequest:
    """One generation request and its progress, shared by scheduler and HTTP handler."""

    prompt_tokens: int
    max_new_tokens: int
    category: str = "random"  # what the prompt is, for acceptance (perf_model.CATEGORIES)
    stream: bool = False
    stream_interval: int = 1
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None
    output_ids: list[int] = field(default_factory=list)
    spec_verify_ct: int = 0
    spec_correct_drafts: int = 0
    spec_proposed_drafts: int = 0
    # verify steps by how many drafts they accepted (index k: k correct), as sglang's
    # Req.spec_correct_drafts_histogram
    spec_correct_drafts_histogram: list[int] = field(default_factory=list)
    finished: bool = False
    aborted: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event)
    _steps_since_emit: int = 0

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def context(self) -> int:
        """Tokens in its KV cache: the prompt and what was generated so far."""
        return self.prompt_tokens + len(self.output_ids)

    def finish_reason(self) -> dict[str, Any] | None:
        """sglang's finish_reason: None while running."""
        if self.aborted:
            return {"type": "abort", "message": "Abort before finishing."}
        if not self.finished:
            return None
        return {"type": "length", "length": self.max_new_tokens}


class Engine:
    """The simulated scheduler process (one per server)."""

    def __init__(
        self,
        profile: PerfProfile,
        spec: SpecConfig | None,
        max_running_requests: int,
        time_scale: float = 1.0,
        seed: int = 0,
        overlap: bool = True,
        chunked_prefill_size: int = 8192,
        max_total_num_tokens: int = 400_000,
        decode_log_interval: int = 40,
        log: Callable[[str], None] | None = None,
        adaptive: AdaptiveRuntime | None = None,
    ) -> None:
        self.profile = profile
        self.spec = spec
        self.adaptive = adaptive if spec is not None else None
        self.max_running_requests = max(1, max_running_requests)
        self.time_scale = time_scale
        self.overlap = overlap if spec is None else spec.overlap
        self.chunked_prefill_size = max(1, chunked_prefill_size)
        self.max_total_num_tokens = max_total_num_tokens
        self.decode_log_interval = max(1, decode_log_interval)
        self._log = log or (lambda _msg: None)
        self._rng = random.Random(seed)
        self._samplers: dict[str, AcceptSampler] = {}
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self._kv_tokens = 0  # sum of the running requests' contexts
        self._wake = asyncio.Event()
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self.reset_stats()
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.last_gen_throughput = 0.0
        self._interval_tokens = 0
        self._interval_start = 0.0
        self._decode_steps = 0
        self.last_step_ms = 0.0  # the model's duration of the latest step (time scale 1)

    # --- public API -------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="scheduler")

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for req in [*self.running, *self.waiting]:
            req.aborted = True
            req.event.set()

    def submit(self, req: SimRequest) -> None:
        """Queue a request; the scheduler admits it at its next step."""
        req.created = asyncio.get_running_loop().time()
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        """Drop a request (client went away); it leaves the batch at the next step."""
        if req.finished:
            return
        req.aborted = True
        req.event.set()

    def reset_stats(self) -> None:
        """Lifetime speculative counters (sglang resets them on /flush_cache)."""
        self.spec_verify_ct = 0
        self.spec_accepted_tokens = 0

    @property
    def avg_spec_accept_length(self) -> float:
        if not self.spec_verify_ct:
            return 0.0
        return self.spec_accepted_tokens / self.spec_verify_ct

    @property
    def is_idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def mean_context(self) -> float:
        """Mean KV tokens per running request (what a decode step reads per sequence)."""
        return self._kv_tokens / len(self.running) if self.running else 0.0

    def sampler(self, category: str) -> AcceptSampler:
        """The accept-length sampler of a text category (built on first use)."""
        sampler = self._samplers.get(category)
        if sampler is None:
            assert self.spec is not None
            sampler = AcceptSampler(self.profile, self.spec, self._rng, category)
            self._samplers[category] = sampler
        return sampler

    # --- scheduler loop ---------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        self._interval_start = deadline
        while not self._stopped:
            self._drop_aborted()
            if self.is_idle:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            new = self._admit()
            if new:
                tokens = sum(r.prompt_tokens for r in new)
                step_ms = prefill_step_ms(self.profile, tokens, self.spec, self.overlap)
                self._log_prefill(new, tokens)
            elif self.adaptive is not None:
                self.adaptive.activate(len(self.running))
                step_ms = self.adaptive.cycle_ms(len(self.running), self.mean_context)
            else:
                batch, ctx = len(self.running), self.mean_context
                step_ms = decode_step_ms(self.profile, batch, self.spec, self.overlap, ctx)
            self.last_step_ms = step_ms
            deadline += step_ms * self.time_scale / 1000.0
            now = loop.time()
            if deadline < now - MAX_LAG_S:
                deadline = now
            await asyncio.sleep(max(0.0, deadline - now))
            now = loop.time()
            if new:
                self._finish_prefill(new, now)
            else:
                self._decode(now)

    def _drop_aborted(self) -> None:
        if any(r.aborted for r in self.running):
            self.running = [r for r in self.running if not r.aborted]
            self._kv_tokens = sum(r.context for r in self.running)
        if any(r.aborted for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.aborted)

    def _admit(self) -> list[SimRequest]:
        """New requests for a prefill step: up to max_running_requests, the chunked-prefill
        budget, and the KV pool. As sglang's PrefillAdder, a request is admitted only when
        the pool holds its prompt and its whole output beside what the running requests
        hold and still need (with ignore_eos they need all of it); a request that fits
        nothing beside it still runs alone. At long contexts the pool, not the cap, bounds
        the batch: 128 streams of 32k tokens queue on a pool of 400k."""
        new: list[SimRequest] = []
        budget = self.chunked_prefill_size
        pool = self.max_total_num_tokens
        held = sum(r.context + r.max_new_tokens - len(r.output_ids) for r in self.running)
        while self.waiting and len(self.running) + len(new) < self.max_running_requests:
            req = self.waiting[0]
            if new and req.prompt_tokens > budget:
                break
            need = req.prompt_tokens + req.max_new_tokens
            if (self.running or new) and held + need > pool:
                break
            budget -= req.prompt_tokens
            held += need
            new.append(self.waiting.popleft())
        return new

    def _finish_prefill(self, new: list[SimRequest], now: float) -> None:
        for req in new:
            self.prompt_tokens_total += req.prompt_tokens
            if req.aborted:
                continue
            self._append(req, 1, now)
            if not req.finished:
                self.running.append(req)
                self._kv_tokens += req.context

    def _decode(self, now: float) -> None:
        adaptive = self.adaptive
        produced = 0
        kv_tokens = 0
        still: list[SimRequest] = []
        correct: list[int] = []
        for req in self.running:
            if req.aborted:
                continue
            n = 1
            if self.spec is not None:
                if adaptive is not None:
                    n = adaptive.sample(req.category)
                else:
                    n = self.sampler(req.category).sample()
                correct.append(n - 1)
                req.spec_verify_ct += 1
                req.spec_proposed_drafts += self.spec.num_draft_tokens - 1
                # the verify's accepted run, as sglang counts it (accept_lens - 1 in
                # _resolve_spec_v2_tokens), also where max_new_tokens then cuts the output
                req.spec_correct_drafts += n - 1
                _count(req.spec_correct_drafts_histogram, n - 1)
                n = min(n, req.max_new_tokens - len(req.output_ids))
                self.spec_verify_ct += 1
                self.spec_accepted_tokens += n
            produced += n
            self._append(req, n, now)
            if not req.finished:
                still.append(req)
                kv_tokens += req.context
        if adaptive is not None:
            adaptive.on_verify_complete(correct, batch_size=len(self.running))
        self.running = still
        self._kv_tokens = kv_tokens
        self._decode_steps += 1
        self._interval_tokens += produced
        if self._decode_steps % self.decode_log_interval == 0:
            self._log_decode(now)

    def _append(self, req: SimRequest, n: int, now: float) -> None:
        start = len(req.output_ids)
        req.output_ids.extend(token_id_at(i) for i in range(start, start + n))
        self.generation_tokens_total += n
        if req.first_token_time is None:
            req.first_token_time = now
        req._steps_since_emit += 1
        if len(req.output_ids) >= req.max_new_tokens:
            req.finished = True
            req.finish_time = now
            req.event.set()
        elif req.stream and (start == 0 or req._steps_since_emit >= req.stream_interval):
            req._steps_since_emit = 0
            req.event.set()

    # --- sglang-style log lines -------------------------------------------------
    def token_usage(self) -> float:
        return self._kv_tokens / self.max_total_num_tokens

    def _log_prefill(self, new: list[SimRequest], tokens: int) -> None:
        self._log(
            f"Prefill batch. #new-seq: {len(new)}, #new-token: {tokens}, #cached-token: 0, "
            f"token usage: {self.token_usage():.2f}, #running-req: {len(self.running)}, "
            f"#queue-req: {len(self.waiting)}"
        )

    def _log_decode(self, now: float) -> None:
        elapsed = now - self._interval_start
        if elapsed > 0:
            self.last_gen_throughput = self._interval_tokens / elapsed
        self._interval_tokens = 0
        self._interval_start = now
        accept = f"accept len: {self.avg_spec_accept_length:.2f}, " if self.spec else ""
        self._log(
            f"Decode batch. #running-req: {len(self.running)}, "
            f"#token: {self._kv_tokens}, "
            f"token usage: {self.token_usage():.2f}, {accept}cuda graph: True, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting)}"
        )
