"""Continuous-batching performance model of an SGLang server (pure functions, no I/O).

Why a model at all: specsweep must be testable and demonstrable without GPUs, and the
decisions it automates (is speculation worth it, and up to which concurrency?) only
make sense if the simulated server reproduces the *shape* of real measurements.

Target forward pass (one batch of ``B`` requests processing ``N`` tokens in total)::

    t_target(B, N) = t0 + a_req * B + a_tok * N + a_knee * max(0, N - knee)
                   + a_kv * sum_i(context_i) / 1000

``t0`` is the fixed cost (reading the weights, kernel launches, all-reduce latency),
``a_req`` the per-sequence cost that does not grow with the context (sampling, the
attention kernel's fixed work), ``a_tok`` the per-token cost (the GEMMs) and ``a_kv``
(``kv_ms_per_ktok``) the time to read 1000 tokens of one sequence's KV cache:
``context_i`` is sequence i's prompt plus the tokens generated so far, and a forward
reads it once whatever the number of its tokens in the forward (a verify over ``n``
draft tokens reads the KV once for all of them). ``a_kv`` comes from the model's KV
bytes per token and the GPU's memory bandwidth (each profile writes the derivation);
at long contexts this term dominates, which is why speculation keeps paying at larger
batches there (MagicDec, arXiv 2408.11049). Past ``knee`` tokens in one forward the GEMMs stop
being memory-bound and each token costs ``a_knee`` more (a roofline in two lines):
this is why a 16-token draft tree is nearly free for one stream and expensive for
48 of them (768 verify tokens). A baseline decode step has ``N = B``, so it is the
``t(B) = t0 + a*B`` of the literature with ``a = a_req + a_tok``. Without the overlap
scheduler (``--disable-overlap-schedule``, and speculation v1) every step also pays
``sched_overhead_ms`` of CPU scheduling that overlap would hide.

Prefill (new requests, sglang runs them as their own step, decode waits)::

    t_prefill = prefill_t0 + prefill_ms_per_token * prompt_tokens   (x (1 + draft share))

Speculative cycle (EAGLE/EAGLE3/STANDALONE) for ``B`` requests, ``s`` steps, top-k ``k``
and ``n`` draft tokens::

    t_cycle = s * (d0 + d1 * B * k)          # draft forwards (a small model)
            + (d0 + d1 * B * n)              # draft extend over the verified tokens
            + (s + 1) * d_kv * sum_i(context_i) / 1000  # the draft's own KV, per forward
            + t_target(B, B * n)             # one verify forward
            + spec_overhead_ms + spec_ms_per_req * B   # tree building, bookkeeping

``d_kv`` (``draft.kv_ms_per_ktok``) is the draft model's KV read: one layer for an
EAGLE head, so ~1/32 of the target's for Llama-3.1-8B; each draft forward reads each
request's draft KV once (the top-k branches share the prefix: an optimistic reading).

Zero-step cycle (``num_steps == 0``, only reached by adaptive speculation, sglang
0.5.23's ``EAGLEWorkerV2.forward_batch_generation`` with ``_build_trivial_verify_input``)::

    t_zero = t_target(B, B)                  # TARGET_VERIFY over a 1-node tree per request
           + (d0 + d1 * B)                   # draft extend over 1 token per request,
                                             #   0 with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND
           + spec_overhead_ms + zero_step_per_seq_ms * B   # the worker's fixed bookkeeping

No draft forwards and no tree build (``draft()`` is skipped); every request gets exactly
one token. See ``zero_step_cycle_ms`` for why only part of the per-request bookkeeping
remains.

STANDALONE multiplies the draft terms by ``standalone_draft_factor``; NGRAM, the block
drafters (DFLASH, DSPARK, UNO) and FROZEN_KV_MTP have their own draft cost and acceptance
(``draft_ms``, ``_ngram_probs``, ``_block_probs``; docs/simulator.md, "Algorithms").
The verify shares each request's fixed and KV costs
across its draft tokens (only ``a_tok`` scales with ``n``), which is why speculation
is cheap at low batch (the draft tokens ride along on a memory-bound step) and
expensive at saturation (every rejected draft token is wasted work, the per-request
costs grow with ``B``). A linear model cannot have both a ~1.5x win at C=1 and a ~2x
loss at C=64 with a late pivot; the default profile settles for a pivot near C=5-6.

Acceptance: the draft token at depth ``d`` is accepted with probability
``alpha_d = p * decay**(d-1)`` (or the profile's explicit ``by_depth`` list) for a
chain (topk = 1); a tree of effective width
``w = min(topk, (n-1)/s)`` gives ``1 - (1 - alpha_d) ** (w ** topk_gain)``. A cycle
accepts tokens until the first rejection, plus the bonus token from the target::

    E[L] = 1 + sum_{j=1..D} prod_{d=1..j} alpha_d,    D = min(s, n - 1)

so more steps add less and less (concave) while their draft cost grows linearly.
Per-cycle lengths are sampled from that exact distribution (``AcceptSampler``), so
their mean equals ``E[L]``.

Acceptance depends on the text (``category``): the profile's constants describe random
token ids (the calibration convention: the seeds do not say which workload they ran), and
a category ``c`` scales every depth's rejection: ``alpha_d' = 1 - (1 - alpha_d) * r[c]``
(``r = 1`` for ``random``; natural text accepts more, ``r < 1``; see ``CATEGORIES`` and
docs/simulator.md for the values and their sources). ``text`` (natural text of unknown
kind) takes ``chat``'s scale unless the profile sets its own.

Decode throughput at concurrency ``C`` (``steady_state_throughput``) is
``B * E[L] / t_cycle(B)`` with ``B = min(C, max_running_requests)``: queueing beyond
the cap adds latency but no throughput. It is evaluated at a mean ``context`` per running
sequence (default: the profile's ``calibration_context``, the context its constants were
fitted at); ``decode_context(input_len, output_len)`` is that mean for a closed loop of
fixed lengths (``input_len + output_len / 2``).

Profiles (constants, hardware, startup times and the seeds figures each one is
calibrated to) are data files, see ``specsweep.sim.profiles``.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, replace
from typing import Any

ALGORITHMS = (
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "FROZEN_KV_MTP", "NGRAM", "DFLASH", "DSPARK", "UNO",
)  # fmt: skip
# Block drafters: one draft forward proposes a whole block in parallel (DFLASH's verify window
# is the block; DSPARK's is gamma + 1), so SpecConfig.num_draft_tokens is the block's size.
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK", "UNO")
# What a request's text is, as far as acceptance cares; "random" is random token ids (or
# random words), "text" natural text of unknown kind.
CATEGORIES = ("random", "text", "chat", "code", "reasoning", "summarisation")
# Rejection scale per category, applied as alpha' = 1 - (1 - alpha) * r: the profile's
# constants describe random ids (r = 1). Chosen so that on the Llama-3.1-8B profile's
# 7-step EAGLE-3 chain the accept lengths relative to chat are those published for that
# drafter (code 1.26x, reasoning 1.21x: Nebius's measurements of
# yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on HumanEval, GSM8K and MT-bench), summarisation
# (CNN/DM, lowest of the natural kinds in the EAGLE papers) 0.90x assumed, and random
# ids ~0.75x of chat (assumed). docs/simulator.md has the table.
DEFAULT_REJECTION_SCALE: tuple[tuple[str, float], ...] = (
    ("random", 1.0),
    ("chat", 0.57),
    ("code", 0.31),
    ("reasoning", 0.35),
    ("summarisation", 0.71),
)


# NGRAM drafts what the context (prompt and output so far) already contains: the chance
# that the next token continues an n-gram match, per category (random ids repeat nothing;
# code and summarisation copy from their prompt; open chat least). Assumed, ordered as
# prompt lookup / REST / lookahead decoding report (docs/simulator.md).
DEFAULT_NGRAM_MATCH_RATE: tuple[tuple[str, float], ...] = (
    ("random", 0.02),
    ("chat", 0.3),
    ("code", 0.6),
    ("reasoning", 0.4),
    ("summarisation", 0.55),
)


@dataclass(frozen=True)
class PerfProfile:
    """Timing (milliseconds at time scale 1) and acceptance constants, plus the
    hardware and startup times the simulated server reports. Built from a data file
    by ``specsweep.sim.profiles``; these defaults are the ``default`` profile's."""

    name: str
    description: str = ""
    assumptions: str = ""
    calibration: tuple[CalibrationPoint, ...] = ()
    # target model forward
    t0_ms: float = 9.64
    a_req_ms: float = 0.463
    a_tok_ms: float = 0.694
    knee_tokens: int = 0
    a_knee_ms: float = 0.0
    kv_ms_per_ktok: float = 0.0  # reading 1000 tokens of one sequence's KV, per forward
    calibration_context: float = 256.0  # mean context per sequence the fit was made at
    sched_overhead_ms: float = 0.9
    prefill_t0_ms: float = 6.0
    prefill_ms_per_token: float = 0.04
    # draft model
    draft_prefill_share: float = 0.15
    draft_t0_ms: float = 0.8
    draft_ms_per_token: float = 0.25
    standalone_draft_factor: float = 2.5
    ngram_draft_ms: float = 0.3
    draft_kv_ms_per_ktok: float = 0.0  # the draft model's KV read, per draft forward
    # speculative bookkeeping
    spec_overhead_ms: float = 0.3
    spec_ms_per_req: float = 1.0
    zero_step_per_seq_ms: float = 0.0  # per-request bookkeeping left at steps 0
    # acceptance
    accept_p: float = 0.85
    accept_decay: float = 0.85
    accept_by_depth: tuple[float, ...] = ()
    topk_gain: float = 0.5
    eagle_accept_factor: float = 0.95
    rejection_scale: tuple[tuple[str, float], ...] = DEFAULT_REJECTION_SCALE
    # the algorithms beyond EAGLE (docs/simulator.md, "Algorithms", has each figure's source)
    ngram_ms_per_req: float = 0.02  # CPU trie lookup per request per cycle
    ngram_match_rate: tuple[tuple[str, float], ...] = DEFAULT_NGRAM_MATCH_RATE
    ngram_decay: float = 0.9
    block_draft_factor: float = 5.0  # a block drafter's forward vs an EAGLE head's (5 layers)
    block_accept_p: float = 0.8
    block_accept_decay: float = 0.88
    mtp_layer_share: float = 1 / 32  # an MTP layer's share of a target forward
    uno_draft_factor: float = 1.1  # UNO drafts with the target plus a LoRA
    # limits
    default_max_running_requests: int = 1024
    max_total_num_tokens: int = 400_000
    context_length: int = 131072  # the model's, reported when --context-length is unset
    # hardware (the simulated GPU inventory) and startup (wall seconds at time scale 1)
    gpu_name: str = "NVIDIA H200"
    gpu_count: int = 1
    gpu_memory_mib: int = 143771
    cuda_context_mib: int = 520
    load_seconds: float = 2.0
    warmup_seconds: float = 1.0
    health_seconds: float = 1.0


@dataclass(frozen=True)
class SpecConfig:
    """Resolved speculative settings (after sglang's own argument rules)."""

    algorithm: str
    num_steps: int
    topk: int
    num_draft_tokens: int
    overlap: bool = False

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown speculative algorithm {self.algorithm!r}")
        if self.is_zero_step:
            return
        if self.num_steps < 1 or self.topk < 1 or self.num_draft_tokens < 2:
            raise ValueError(
                "need num_steps >= 1, topk >= 1, num_draft_tokens >= 2 (or the zero-step "
                "cycle of adaptive EAGLE: num_steps 0, topk 1, 1 draft token)"
            )

    @property
    def is_zero_step(self) -> bool:
        """sglang's trivial verify (adaptive speculation at steps 0): EAGLE/EAGLE3 with
        num_steps 0, topk 1 and a 1-node tree (num_draft_tokens 1)."""
        return (
            self.num_steps == 0
            and self.topk == 1
            and self.num_draft_tokens == 1
            and self.algorithm in ("EAGLE", "EAGLE3", "NEXTN")
        )


@dataclass(frozen=True)
class CalibrationPoint:
    """A real measurement a profile is fitted to; tests and the calibration benchmark
    check the model against it, so a profile cannot silently drift from its source."""

    label: str
    concurrency: int = 1
    spec: SpecConfig | None = None
    max_running_requests: int | None = None
    tok_s: float | None = None  # expected output throughput
    accept_length: float | None = None  # expected tokens per verify cycle
    tolerance: float = 0.1  # relative
    source: str = ""
    context: float | None = None  # mean context per sequence; None: the profile's
    category: str = "random"  # what the prompts were (the profiles' convention: random)


def model_tok_s(p: PerfProfile, point: CalibrationPoint) -> float:
    """What the model predicts for a calibration point's throughput."""
    return steady_state_throughput(
        p,
        point.concurrency,
        point.spec,
        point.max_running_requests,
        context=point.context,
        category=point.category,
    )


def model_accept_length(p: PerfProfile, point: CalibrationPoint) -> float:
    """What the model predicts for a calibration point's accept length (1 without spec)."""
    return 1.0 if point.spec is None else expected_accept_length(p, point.spec, point.category)


def decode_context(input_len: float, output_len: float) -> float:
    """Mean context per running sequence over a closed loop of fixed lengths: the prompt
    plus half the output (each decode step reads the prompt and what was generated)."""
    return input_len + output_len / 2


def _context(p: PerfProfile, context: float | None) -> float:
    return p.calibration_context if context is None else max(0.0, context)


def target_forward_ms(
    p: PerfProfile, batch: int, tokens: int, context: float | None = None
) -> float:
    """One target forward over ``batch`` sequences and ``tokens`` tokens, each sequence
    holding ``context`` tokens of KV (mean; default: the profile's calibration context)."""
    if batch <= 0:
        return 0.0
    knee = p.a_knee_ms * max(0, tokens - p.knee_tokens)
    kv = p.kv_ms_per_ktok * batch * _context(p, context) / 1000.0
    return p.t0_ms + p.a_req_ms * batch + p.a_tok_ms * tokens + knee + kv


def baseline_step_ms(
    p: PerfProfile, batch: int, overlap: bool = True, context: float | None = None
) -> float:
    """Decode step of the non-speculative server: one token per running request."""
    if batch <= 0:
        return 0.0
    sched = 0.0 if overlap else p.sched_overhead_ms
    return target_forward_ms(p, batch, batch, context) + sched


def prefill_step_ms(
    p: PerfProfile, prompt_tokens: int, spec: SpecConfig | None = None, overlap: bool = True
) -> float:
    """Prefill step for newly admitted requests (sglang runs it instead of a decode).
    Linear in the prompt: attention's quadratic share of a long prefill is not modelled."""
    t = p.prefill_t0_ms + p.prefill_ms_per_token * max(prompt_tokens, 0)
    if spec is not None and spec.algorithm == "FROZEN_KV_MTP":
        t *= 1.0 + p.mtp_layer_share
    elif spec is not None and spec.algorithm not in ("NGRAM", "UNO"):
        t *= 1.0 + p.draft_prefill_share
    return t + (0.0 if overlap else p.sched_overhead_ms)


def draft_kv_ms(p: PerfProfile, batch: int, context: float | None = None) -> float:
    """The draft model's KV read in one draft forward over ``batch`` requests."""
    return p.draft_kv_ms_per_ktok * batch * _context(p, context) / 1000.0


def draft_ms(p: PerfProfile, batch: int, spec: SpecConfig, context: float | None = None) -> float:
    """All draft forwards of one speculative cycle (``num_steps`` + the draft extend).

    NGRAM: no GPU work, a trie lookup on the CPU (fixed + per request). Block drafters
    (DFLASH, DSPARK): one forward of a ``block_draft_factor``-times-an-EAGLE-head drafter
    over the block, reading its own KV once. UNO: the block drafted by the target itself
    (plus its LoRA). FROZEN_KV_MTP: each step an MTP layer, ``mtp_layer_share`` of a target
    forward over the same tokens (its attention reads the target's frozen KV)."""
    if spec.algorithm == "NGRAM":
        return p.ngram_draft_ms + p.ngram_ms_per_req * batch
    block = spec.num_draft_tokens
    if spec.algorithm in ("DFLASH", "DSPARK"):
        forward = p.draft_t0_ms + p.draft_ms_per_token * batch * block
        return p.block_draft_factor * (forward + draft_kv_ms(p, batch, context))
    if spec.algorithm == "UNO":
        return p.uno_draft_factor * target_forward_ms(p, batch, batch * block, context)
    if spec.algorithm == "FROZEN_KV_MTP":
        steps = spec.num_steps * target_forward_ms(p, batch, batch * spec.topk, context)
        extend = target_forward_ms(p, batch, batch * block, context)
        return p.mtp_layer_share * (steps + extend)
    steps = spec.num_steps * (p.draft_t0_ms + p.draft_ms_per_token * batch * spec.topk)
    extend = p.draft_t0_ms + p.draft_ms_per_token * batch * spec.num_draft_tokens
    kv = (spec.num_steps + 1) * draft_kv_ms(p, batch, context)
    factor = p.standalone_draft_factor if spec.algorithm == "STANDALONE" else 1.0
    return (steps + extend + kv) * factor


def zero_step_cycle_ms(
    p: PerfProfile,
    batch: int,
    overlap: bool = False,
    skip_draft_extend: bool = False,
    context: float | None = None,
) -> float:
    """One cycle at ``speculative_num_steps == 0`` (adaptive speculation), ``batch`` requests.

    What sglang 0.5.23 runs then (``EAGLEWorkerV2.forward_batch_generation``):

    * no ``draft()``: no draft forwards, no ``prepare_for_draft`` KV allocation for draft
      tokens, no ``build_eagle_verify_input`` tree build; ``_build_trivial_verify_input``
      makes a 1-node tree per request with a handful of fixed-size tensor ops;
    * ``verify()`` (``run_eagle_verify``): the TARGET_VERIFY forward over ``batch``
      tokens, one per request, i.e. the same forward as a baseline decode step
      (``target_forward_ms(batch, batch)``, whose per-sequence term already holds the
      sampling a decode does), then sampling/acceptance of the 1-node tree and the
      commit of one token per request;
    * ``_draft_extend_for_decode`` over ``num_draft_tokens = 1`` token per request (a
      draft forward, ``draft_t0_ms + draft_ms_per_token * batch``), skipped when
      ``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND`` is true (``skip_draft_extend``);
    * the speculative worker's fixed bookkeeping (``spec_overhead_ms``: plan-stream
      syncs, extra launches, the adaptive state switch), and of the per-request
      bookkeeping (``spec_ms_per_req`` in a drafting cycle: draft KV slots, tree
      masks and positions, accept-path moves, multi-token commits) only what a 1-node
      tree still needs beyond a plain decode: ``zero_step_per_seq_ms`` (default 0: the
      acceptance of one root and the commit of one token are what a baseline decode's
      sampling and output already do; set it from a measurement of the v2 worker);
    * without the overlap scheduler, the same CPU scheduling cost as any step.

    Every request gets exactly one token (accept length 1, no correct drafts).
    """
    if batch <= 0:
        return 0.0
    verify = target_forward_ms(p, batch, batch, context)
    extend = 0.0
    if not skip_draft_extend:
        extend = p.draft_t0_ms + p.draft_ms_per_token * batch + draft_kv_ms(p, batch, context)
    overhead = p.spec_overhead_ms + p.zero_step_per_seq_ms * batch
    return verify + extend + overhead + (0.0 if overlap else p.sched_overhead_ms)


def spec_cycle_ms(
    p: PerfProfile,
    batch: int,
    spec: SpecConfig,
    skip_zero_step_draft_extend: bool = False,
    context: float | None = None,
) -> float:
    """Draft + verify + overhead of one speculative cycle for ``batch`` requests."""
    if batch <= 0:
        return 0.0
    if spec.is_zero_step:
        skip = skip_zero_step_draft_extend
        return zero_step_cycle_ms(p, batch, spec.overlap, skip, context)
    verify = target_forward_ms(p, batch, batch * spec.num_draft_tokens, context)
    sched = 0.0 if spec.overlap else p.sched_overhead_ms
    overhead = p.spec_overhead_ms + p.spec_ms_per_req * batch
    return draft_ms(p, batch, spec, context) + verify + overhead + sched


def decode_step_ms(
    p: PerfProfile,
    batch: int,
    spec: SpecConfig | None,
    overlap: bool,
    context: float | None = None,
) -> float:
    """Duration of one decode step (baseline) or cycle (speculation)."""
    if spec is None:
        return baseline_step_ms(p, batch, overlap, context)
    return spec_cycle_ms(p, batch, spec, context=context)


def rejection_scale(p: PerfProfile, category: str) -> float:
    """``r`` of a category: ``alpha' = 1 - (1 - alpha) * r`` (``text`` falls back to chat)."""
    table = dict(p.rejection_scale)
    if category not in CATEGORIES:
        raise ValueError(f"unknown text category {category!r}; known: {list(CATEGORIES)}")
    if category == "text" and "text" not in table:
        category = "chat"
    return table.get(category, 1.0)


def accept_probs(p: PerfProfile, spec: SpecConfig, category: str = "random") -> list[float]:
    """Per-depth acceptance probabilities alpha_1..alpha_D (decaying with depth) for
    prompts of a category (the profile's constants are random ids')."""
    depth = min(spec.num_steps, spec.num_draft_tokens - 1)
    if spec.algorithm == "NGRAM":
        return _ngram_probs(p, spec, category)
    if spec.algorithm in BLOCK_ALGORITHMS:
        return _block_probs(p, spec, category)
    if depth <= 0:
        return []  # the zero-step cycle drafts nothing: accept length 1
    base = 1.0
    width = 1.0
    if spec.algorithm in ("EAGLE", "NEXTN"):
        base *= p.eagle_accept_factor
    width = max(1.0, min(float(spec.topk), (spec.num_draft_tokens - 1) / spec.num_steps))
    exponent = width**p.topk_gain
    scale = rejection_scale(p, category)
    probs = []
    for d in range(1, depth + 1):
        alpha = min(base * _chain_alpha(p, d), 1.0)
        alpha = max(0.0, 1.0 - (1.0 - alpha) * scale)
        probs.append(1.0 - (1.0 - alpha) ** exponent)
    return probs


def _ngram_probs(p: PerfProfile, spec: SpecConfig, category: str) -> list[float]:
    """NGRAM: the match continues at depth ``d`` with ``m[c] * ngram_decay**(d-1)``, ``m`` the
    category's match rate (``text`` as chat); a BFS breadth ``w`` (sglang's topk) offers
    ``w`` continuations at the first depth only (``1 - (1 - m)**(w**topk_gain)``)."""
    table = dict(p.ngram_match_rate)
    rejection_scale(p, category)  # the same unknown-category error
    match = table.get("chat" if category == "text" and "text" not in table else category, 0.0)
    probs = []
    for d in range(1, spec.num_draft_tokens):
        alpha = min(1.0, match * p.ngram_decay ** (d - 1))
        if d == 1:
            alpha = 1.0 - (1.0 - alpha) ** (max(spec.topk, 1) ** p.topk_gain)
        probs.append(alpha)
    return probs


def _block_probs(p: PerfProfile, spec: SpecConfig, category: str) -> list[float]:
    """Block drafters: the block's positions are drafted together, not each on the last, so
    acceptance falls per position (``block_accept_p * block_accept_decay**(d-1)``), scaled by
    the category like a chain; positions 1..block-1 (the block's first token is the
    verified bonus). UNO's tree mode widens each position like an EAGLE tree."""
    scale = rejection_scale(p, category)
    width = 1.0
    if spec.algorithm == "UNO" and spec.topk > 1:
        width = max(1.0, min(float(spec.topk), (spec.num_draft_tokens - 1) / spec.num_steps))
    probs = []
    for d in range(1, spec.num_draft_tokens):
        alpha = min(1.0, p.block_accept_p * p.block_accept_decay ** (d - 1))
        alpha = max(0.0, 1.0 - (1.0 - alpha) * scale)
        probs.append(1.0 - (1.0 - alpha) ** (width**p.topk_gain))
    return probs


def _chain_alpha(p: PerfProfile, depth: int) -> float:
    """Chain acceptance at a depth (1-based) before the algorithm factor."""
    table = p.accept_by_depth
    if not table:
        return p.accept_p * p.accept_decay ** (depth - 1)
    if depth <= len(table):
        return table[depth - 1]
    return table[-1] * p.accept_decay ** (depth - len(table))


def accept_length_distribution(
    p: PerfProfile, spec: SpecConfig, category: str = "random"
) -> list[float]:
    """P(L = 1), P(L = 2), ... for the tokens one cycle adds (bonus token included)."""
    dist = []
    survive = 1.0
    for alpha in accept_probs(p, spec, category):
        dist.append(survive * (1.0 - alpha))
        survive *= alpha
    dist.append(survive)
    return dist


def expected_accept_length(p: PerfProfile, spec: SpecConfig, category: str = "random") -> float:
    """E[L]: mean tokens per verify cycle, including the target's bonus token."""
    dist = accept_length_distribution(p, spec, category)
    return sum((i + 1) * q for i, q in enumerate(dist))


class AcceptSampler:
    """Samples per-cycle accept lengths with one random draw (cheap for big batches)."""

    def __init__(
        self, p: PerfProfile, spec: SpecConfig, rng: random.Random, category: str = "random"
    ) -> None:
        dist = accept_length_distribution(p, spec, category)
        cum, acc = [], 0.0
        for q in dist:
            acc += q
            cum.append(acc)
        cum[-1] = math.inf
        self._cum = cum
        self._rng = rng
        self.category = category
        self.mean = expected_accept_length(p, spec, category)

    def sample(self) -> int:
        return bisect.bisect_right(self._cum, self._rng.random()) + 1


def effective_batch(concurrency: int, max_running_requests: int) -> int:
    """Requests decoding together: the rest queue."""
    return max(0, min(concurrency, max_running_requests))


def steady_state_throughput(
    p: PerfProfile,
    concurrency: int,
    spec: SpecConfig | None = None,
    max_running_requests: int | None = None,
    overlap: bool = True,
    context: float | None = None,
    category: str = "random",
) -> float:
    """Decode output tokens/s at a closed-loop concurrency (prefill ignored), each running
    sequence holding ``context`` tokens of KV on average (default: the profile's
    calibration context; ``decode_context`` turns input and output lengths into it) and
    prompts of ``category`` (default: random ids, the profiles' calibration convention)."""
    cap = max_running_requests or p.default_max_running_requests
    batch = effective_batch(concurrency, cap)
    if batch == 0:
        return 0.0
    step = decode_step_ms(p, batch, spec, overlap, context)
    tokens = batch * (1.0 if spec is None else expected_accept_length(p, spec, category))
    return tokens / (step / 1000.0)


def pivot_concurrency(
    p: PerfProfile,
    spec: SpecConfig,
    max_running_requests: int | None = None,
    limit: int = 1024,
    context: float | None = None,
    category: str = "random",
) -> int | None:
    """Smallest concurrency at which speculation no longer beats the baseline (at a mean
    context and a text category, as ``steady_state_throughput``); None: it wins up to
    ``limit``."""
    for c in range(1, limit + 1):
        spec_tps = steady_state_throughput(
            p, c, spec, max_running_requests, context=context, category=category
        )
        if spec_tps <= steady_state_throughput(p, c, context=context):
            return c
    return None


def with_overrides(p: PerfProfile, **changes: Any) -> PerfProfile:
    """Copy of a profile with some constants changed (tests, what-if studies)."""
    return replace(p, **changes)
