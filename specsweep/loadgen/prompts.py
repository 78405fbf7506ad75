"""Deterministic prompts: random token ids, random words, or a ShareGPT-style dataset.

Token ids rather than text make the prompt length exact without a tokenizer,
and random ids keep the server's prefix cache from turning prefill into a
cache hit. The OpenAI endpoints take text, so there the prompt is random common
words, about one token each (the server's own count is what gets recorded).

Seeding by (seed, concurrency, pass) makes each level reproducible on its own,
so a resumed or retried level sends the same prompts as the first try, while
every pass of a level (and its warmup) sends prompts the others did not: a
repeat of the same prompts would be served from the prefix cache.
"""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

import orjson

# Low ids are special tokens (BOS/EOS/pad/unk) in most vocabularies.
MIN_TOKEN_ID = 100
DEFAULT_VOCAB_SIZE = 32000

# Distinguishes the warmup stream from the measured one of the same level.
_WARMUP_SALT = 0x5EED
_PASS_STRIDE = 1_000_000_007

# Short, common English words: one token each (with the leading space) in the
# vocabularies of Llama, Qwen, Mistral and GPT tokenizers.
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money "
    "story fact month lot right study book eye job word business issue side kind head "
    "house service friend father power hour game line end member law car city name "
    "president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason "
    "research girl guy moment air teacher force education good new first last long "
    "great little own other old big high different small large next early young "
    "important few public bad same able red blue green black white open run walk talk"
)
_WORDS = _WORD_TEXT.split()


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
    span = vocab_size - MIN_TOKEN_ID
    return [
        [MIN_TOKEN_ID + rng.randrange(span) for _ in range(input_len)] for _ in range(n_requests)
    ]


def make_text_prompts(n_requests: int, input_len: int, seed: int) -> list[str]:
    """n_requests prompts of input_len random common words (about input_len tokens)."""
    if input_len < 1 or n_requests < 0:
        raise ValueError(f"need input_len >= 1 and n_requests >= 0, got {input_len}, {n_requests}")
    rng = random.Random(seed)
    return [" ".join(rng.choices(_WORDS, k=input_len)) for _ in range(n_requests)]


@lru_cache(maxsize=2)
def _load_dataset(path: Path, mtime_ns: int) -> tuple[str, ...]:
    del mtime_ns  # part of the cache key only: an edited file is read again
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of conversations")
    prompts = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        for turn in turns if isinstance(turns, list) else ():
            if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
                value = turn.get("value")
                if isinstance(value, str) and value.strip():
                    prompts.append(value)
                break  # the first human turn only, as sglang's bench_serving does
    if not prompts:
        raise ValueError(f"{path}: no conversation has a non-empty first human turn")
    return tuple(prompts)


def load_dataset(path: Path) -> tuple[str, ...]:
    """The first human turn of every ShareGPT-style conversation in a JSON file.

    The format is a list of ``{"conversations": [{"from": "human", "value": ...},
    {"from": "gpt", ...}, ...]}``; entries without a human turn are skipped.
    """
    path = Path(path).expanduser()
    return _load_dataset(path, path.stat().st_mtime_ns)


def pick_dataset_prompts(
    prompts: tuple[str, ...], seed: int, count: int, offset: int = 0
) -> list[str]:
    """count prompts from a fixed shuffle of the dataset, starting at offset.

    The shuffle depends on the seed only, so the passes of a level can take
    consecutive, non-overlapping slices of it (they wrap when the dataset is
    smaller than what the level sends).
    """
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    return [prompts[order[(offset + i) % len(order)]] for i in range(count)]
