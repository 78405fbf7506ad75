"""Deterministic random prompts, given as token ids.

Token ids rather than text make the prompt length exact without a tokenizer,
and random ids keep the server's prefix cache from turning prefill into a
cache hit. Seeding by (seed, concurrency) makes each level reproducible on its
own, so a resumed or retried level sends the same prompts as the first try.
"""

from __future__ import annotations

import random

# Low ids are special tokens (BOS/EOS/pad/unk) in most vocabularies.
MIN_TOKEN_ID = 100
DEFAULT_VOCAB_SIZE = 32000

# Distinguishes the warmup stream from the measured one of the same level.
_WARMUP_SALT = 0x5EED


def level_seed(seed: int, concurrency: int, *, warmup: bool = False) -> int:
    """The prompt seed of one level (and a separate one for its warmup)."""
    mixed = seed * 1_000_003 + concurrency
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
    span = vocab_size - MIN_TOKEN_ID
    return [
        [MIN_TOKEN_ID + rng.randrange(span) for _ in range(input_len)] for _ in range(n_requests)
    ]
