"""Which kind of prompt a request carries, from its text alone (the simulator asks).

A prompt that ends with a bundled prompt is of that prompt's category (fitting
prepends filler and cuts from the start, never the end); one made only of the
random-word vocabulary is ``"random"``; anything else is ``"text"``. The look-up
reads a fixed-size tail of the text, so it costs the same for 100 tokens or 100k.
"""

from __future__ import annotations

from functools import cache

from specsweep.workloads.bundled import load_builtin
from specsweep.workloads.vocab import RANDOM_WORD_SET

CATEGORIES = ("chat", "code", "reasoning", "summarisation")
RANDOM = "random"  # random token ids or random words: what acceptance is calibrated on
TEXT = "text"  # natural text of no known category
SUFFIX_CHARS = 64  # the bundled prompts are indexed by this many of their last characters
_RANDOM_TAIL_CHARS = 256  # random words are checked over this much of the end


@cache
def _index() -> tuple[dict[str, str], tuple[int, ...]]:
    """Bundled prompts' last SUFFIX_CHARS characters (all of a shorter one) -> category,
    and the lengths of the shorter ones' keys."""
    by_suffix: dict[str, str] = {}
    for record in load_builtin().records:
        assert record.text is not None and record.category is not None
        by_suffix[record.text.rstrip()[-SUFFIX_CHARS:]] = record.category
    short = sorted({len(k) for k in by_suffix if len(k) < SUFFIX_CHARS}, reverse=True)
    return by_suffix, tuple(short)


def category_of(text: str) -> str:
    """The bundled category the text ends with, else ``"random"`` or ``"text"``."""
    by_suffix, short = _index()
    tail = text[-(SUFFIX_CHARS + 64) :].rstrip()
    category = by_suffix.get(tail[-SUFFIX_CHARS:])
    if category is not None:
        return category
    for n in short:
        category = by_suffix.get(tail[-n:])
        if category is not None and (len(tail) == n or tail[-n - 1].isspace()):
            return category
    return RANDOM if _random_words(text) else TEXT


def _random_words(text: str) -> bool:
    """Whether every word of the text's end is from the random-word vocabulary."""
    tail = text[-_RANDOM_TAIL_CHARS:]
    words = tail.split()
    if len(text) > len(tail) and words and not tail[0].isspace():
        words = words[1:]  # the cut may have split the first word
    return bool(words) and all(w in RANDOM_WORD_SET for w in words)
