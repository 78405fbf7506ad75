"""Deterministic prompts: random token ids, random words, and picks from a workload.

Token ids rather than text make the prompt length exact without a tokenizer,
and random ids keep the server's prefix cache from turning prefill into a
cache hit. The OpenAI endpoints take text, so there the prompt is random common
words, about one token each (the server's own count is what gets recorded).
Real prompts (the bundled set, a user's file) come from ``specsweep.workloads``;
a level takes them from a fixed shuffle (``pick_shuffled``) that holds every prompt
category in proportion along its whole length (``stratified_order``), so each pass of a
level sends the workload's mix, not a draw from it.

Seeding by (seed, concurrency, pass) makes each level reproducible on its own,
so a resumed or retried level sends the same prompts as the first try, while
every pass of a level (and its warmup) sends prompts the others did not: a
repeat of the same prompts would be served from the prefix cache.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import TypeVar

from specsweep.workloads.vocab import RANDOM_WORDS

T = TypeVar("T")

# Low ids are special tokens (BOS/EOS/pad/unk) in most vocabularies.
MIN_TOKEN_ID = 100
DEFAULT_VOCAB_SIZE = 32000

# Distinguishes the warmup stream from the measured one of the same level.
_WARMUP_SALT = 0x5EED
_PASS_STRIDE = 1_000_000_007


def level_seed(seed: int, concurrency: int, *, warmup: bool = False, repeat: int = 0) -> int:
    """The prompt seed of one pass of a level (and a separate one for its warmup)."""
    mixed = seed * 1_000_003 + concurrency + repeat * _PASS_STRIDE
    return mixed ^ _WARMUP_SALT if warmup else mixed


def make_input_ids(
    n_requests: int, input_len: int, seed: int, vocab_size: int = DEFAULT_VOCAB_SIZE
) -> list[list[int]]:
    """n_requests prompts of exactly input_len ids in [MIN_TOKEN_ID, vocab_size)."""
    if input_len < 1 or n_requests < 0:
        raise ValueError(f"need input_len >= 1 and n_requests >= 0, got {input_len}, {n_requests}")
    if vocab_size <= MIN_TOKEN_ID:
        raise ValueError(f"vocab_size must exceed {MIN_TOKEN_ID}, got {vocab_size}")
    rng = random.Random(seed)
    return [random_ids(rng, input_len, vocab_size) for _ in range(n_requests)]


def random_ids(rng: random.Random, n: int, vocab_size: int = DEFAULT_VOCAB_SIZE) -> list[int]:
    """n random token ids in [MIN_TOKEN_ID, vocab_size)."""
    span = vocab_size - MIN_TOKEN_ID
    return [MIN_TOKEN_ID + rng.randrange(span) for _ in range(n)]


def random_words(rng: random.Random, n: int) -> str:
    """n random common words (about n tokens)."""
    return " ".join(rng.choices(RANDOM_WORDS, k=n))


def make_text_prompts(n_requests: int, input_len: int, seed: int) -> list[str]:
    """n_requests prompts of input_len random common words (about input_len tokens)."""
    if input_len < 1 or n_requests < 0:
        raise ValueError(f"need input_len >= 1 and n_requests >= 0, got {input_len}, {n_requests}")
    rng = random.Random(seed)
    return [random_words(rng, input_len) for _ in range(n_requests)]


def pick_shuffled(
    items: Sequence[T],
    seed: int,
    count: int,
    offset: int = 0,
    strata: Sequence[Hashable] | None = None,
) -> list[T]:
    """count items from a fixed shuffle of `items`, starting at offset.

    The shuffle depends on the seed only, so the passes of a level can take
    consecutive, non-overlapping slices of it (they wrap when there are fewer
    items than what the level sends). ``strata`` (one label per item, e.g. its
    category): the shuffle is ``stratified_order``'s.
    """
    if strata is None:
        order = list(range(len(items)))
        random.Random(seed).shuffle(order)
    else:
        order = stratified_order(strata, seed)
    return [items[order[(offset + i) % len(order)]] for i in range(count)]


def stratified_order(strata: Sequence[Hashable], seed: int) -> list[int]:
    """A random order of the indices in which every run of consecutive items holds each
    stratum in proportion to its size, within about one item (and exactly, wrapping
    included, where the strata are equally large and a run is a multiple of their count).

    Systematic sampling per stratum: the j-th of a stratum's n items (in a shuffled
    order) gets a key drawn in [j/n, (j+1)/n), and the items are sorted by key. Why:
    a speculative server's acceptance differs by category (code accepts more than chat),
    so a pass that drew its categories at random would differ from the next by its mix,
    noise that measures the draw, not the server (one SD of 1.4% per pass of 128 for
    the 8B profile's block drafter on the bundled prompts).
    """
    rng = random.Random(seed)
    members: dict[Hashable, list[int]] = {}
    for i, s in enumerate(strata):
        members.setdefault(s, []).append(i)
    keyed: list[tuple[float, int]] = []
    for idx in members.values():
        rng.shuffle(idx)
        n = len(idx)
        keyed.extend(((j + rng.random()) / n, i) for j, i in enumerate(idx))
    keyed.sort()
    return [i for _, i in keyed]


def pick_in_order(items: Sequence[T], count: int, offset: int = 0) -> list[T]:
    """count items in their own order from offset, wrapping around (a replay's order)."""
    return [items[(offset + i) % len(items)] for i in range(count)]
