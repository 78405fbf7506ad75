"""Real prompts brought to a shape's input length, and the check of a workload before
any server is launched.

A prompt shorter than the input length gets filler in front: other prompts of the
same workload, picked at random and starting at a random word, then a blank line,
then the prompt. The filler is real text (so the drafter sees the kind of text it
will see in production) and differs from request to request at its very first
words, so the server's prefix cache cannot turn a request's prefill into a cache
hit. A prompt longer than the input length loses words from its start: the end
holds the question or instruction (and is what ``category_of`` recognises).
Lengths are measured with ``estimate_tokens``; a fitted prompt is within a token
of the target, apart from prompts that need a cut inside a word they cannot spare.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specsweep.workloads.loaders import DatasetError, resolve_workload
from specsweep.workloads.records import Workload
from specsweep.workloads.tokens import estimate_tokens

if TYPE_CHECKING:
    from specsweep.config import LoadSpec

SEPARATOR = "\n\n"


def fit_prompt(text: str, input_len: int, pool: Workload, rng: random.Random) -> str:
    """`text` brought to about `input_len` tokens (estimate_tokens) with filler from
    `pool` in front, or cut from the start."""
    if input_len < 1:
        raise ValueError(f"input_len must be >= 1, got {input_len}")
    have = estimate_tokens(text)
    if have == input_len:
        return text
    if have > input_len:
        return _cut_start(text, input_len)
    return _with_filler(text, input_len, pool, rng)


def _cut_start(text: str, input_len: int) -> str:
    """The longest end of `text` that is at most input_len tokens, cut between words
    when that costs at most 1% of the length."""
    lo, hi = 0, len(text)  # the smallest start q with estimate(text[q:]) <= input_len
    while lo < hi:
        mid = (lo + hi) // 2
        if estimate_tokens(text[mid:]) <= input_len:
            hi = mid
        else:
            lo = mid + 1
    q = lo
    if 0 < q < len(text) and not text[q - 1].isspace():  # inside a word: try the next one
        nxt = q
        while nxt < len(text) and not text[nxt].isspace():
            nxt += 1
        while nxt < len(text) and text[nxt].isspace():
            nxt += 1
        if nxt < len(text) and estimate_tokens(text[nxt:]) >= input_len - max(1, input_len // 100):
            q = nxt
    while q < len(text) - 1 and text[q].isspace():
        q += 1
    return text[q:]


@dataclass(frozen=True, slots=True)
class _Filler:
    """A workload's texts as filler: each one's words (whitespace collapsed) and length
    joined by single spaces, and where each text is (to leave a prompt out of its own)."""

    words: tuple[tuple[str, ...], ...]
    chars: tuple[int, ...]
    index: dict[str, int]


_fillers: dict[int, tuple[Workload, _Filler]] = {}  # by id(pool): hashing one is O(records)


def _filler(pool: Workload) -> _Filler:
    hit = _fillers.get(id(pool))
    if hit is not None and hit[0] is pool:
        return hit[1]
    texts = [r.text for r in pool.records if r.text is not None and r.text.split()]
    words = tuple(tuple(t.split()) for t in texts)
    filler = _Filler(
        words,
        tuple(sum(map(len, w)) + len(w) - 1 for w in words),
        {t: i for i, t in enumerate(texts)},
    )
    if len(_fillers) >= 4:
        _fillers.pop(next(iter(_fillers)))
    _fillers[id(pool)] = (pool, filler)
    return filler


def _with_filler(text: str, input_len: int, pool: Workload, rng: random.Random) -> str:
    filler = _filler(pool)
    own = filler.index.get(text)
    others = len(filler.words) - (own is not None)
    if others < 1:  # nothing else to fill with: the prompt itself
        filler = _Filler((tuple(text.split()),), (len(" ".join(text.split())),), {})
        own, others = None, 1
    words = len(text.split())
    chars = len(text)  # what the prompt and everything before it add up to
    pieces: list[list[str]] = []  # in reverse: the last one found goes first
    previous = -1
    sep = len(SEPARATOR)
    while True:
        pick = rng.randrange(len(filler.words))
        if pick == own or (pick == previous and others > 1):
            continue
        previous = pick
        piece, piece_chars = filler.words[pick], filler.chars[pick]
        if max(words + len(piece), round((chars + sep + piece_chars) / 4)) < input_len:
            pieces.append(list(piece))
            words += len(piece)
            chars += sep + piece_chars
            continue
        # The piece reaches the target: take only as many of its last words as needed,
        # so the request starts at a random word inside it.
        taken: list[str] = []
        chars += sep - 1
        for word in reversed(piece):
            taken.append(word)
            words += 1
            chars += len(word) + 1
            if max(words, round(chars / 4)) >= input_len:
                break
        taken.reverse()
        # One long word can overshoot: shorten it from the front (the filler's first word).
        while max(words, round(chars / 4)) > input_len and len(taken[0]) > 1:
            cut = min(len(taken[0]) - 1, 4 * (max(words, round(chars / 4)) - input_len))
            taken[0] = taken[0][cut:]
            chars -= cut
        pieces.append(taken)
        break
    pieces.reverse()
    return SEPARATOR.join([*(" ".join(p) for p in pieces), text])


def check_workload(load: LoadSpec, context_length: int | None = None) -> Workload | None:
    """Load and validate the workload of `load` before anything is launched.

    Raises DatasetError for a file that cannot be used, a replay with several shapes,
    and (given the server's context length) the first record whose prompt and output
    tokens do not fit: in natural mode its own estimate (or recorded input_len), in
    fit mode the shape's input_len.
    """
    workload = resolve_workload(load)
    if workload is None:
        return None
    shapes = load.shape_list()
    if workload.kind == "replay" and len(shapes) > 1:
        raise DatasetError(
            f"{load.dataset}: a replay sends every request at its recorded lengths; "
            f"give one shape, not {len(shapes)} ({', '.join(s.label for s in shapes)})"
        )
    if context_length is None:
        return workload
    where = workload.name if workload.kind == "builtin" else str(load.dataset)
    limit = f"exceed the server's context length {context_length}"
    if workload.kind != "replay" and load.prompt_length == "fit":
        for shape in shapes:
            if shape.input_len + shape.output_len > context_length:
                raise DatasetError(
                    f"{where}: shape {shape.label} (every prompt is fitted to it): "
                    f"{shape.input_len} prompt + {shape.output_len} output tokens {limit}"
                )
        return workload
    for record in workload.records:
        if workload.kind == "replay":
            prompt, output = record.input_len or 0, record.output_len or 0
        else:
            prompt = estimate_tokens(record.text or "")
            output = record.output_len or shapes[0].output_len
        if prompt + output > context_length:
            raise DatasetError(
                f"{where}: line {record.line}: {prompt} prompt + {output} output tokens {limit}"
            )
    return workload
