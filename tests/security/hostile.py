"""Hostile strings for the property-based tests: what a shell would act on, plus text
a naive quoting or file name would mangle.

Every injection fragment would create ``canary`` if any shell ever interpreted it,
so a test only has to check that the canary file does not exist afterwards.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from hypothesis import strategies as st

# One canary per test session; a leftover from an earlier session cannot mask a new one.
CANARY = Path("/tmp") / f"specsweep-pwned-{uuid.uuid4().hex}"

_INJECTIONS = (
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"; touch {CANARY}",
    f"&& touch {CANARY}",
    f"| touch {CANARY}",
    f"\ntouch {CANARY}\n",
    f"'; touch {CANARY}; '",
    f'"; touch {CANARY}; "',
    f"$(IFS=_;touch${{IFS}}{CANARY})",
)
_AWKWARD = (
    " ", "  ", "'", '"', "\\", "\\'", "$HOME", "${PATH}", "$1", "*", "?", "[a]", "~", "#",
    "\t", "\r", "\n", "%s", "{}", "!!", ">", "<", "&", "|", "=", "--", "-x", "é", "日本語",
    "🙂", "\u202e", "\x1b[31m", "\u00a0", "..", "/",
)  # fmt: skip

# Any character a file or an environment can hold: no NUL, no lone surrogates.
_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")


def hostile_text(min_size: int = 1) -> st.SearchStrategy[str]:
    """Injection fragments, awkward characters and arbitrary unicode, concatenated."""
    piece = st.one_of(
        st.sampled_from(_INJECTIONS),
        st.sampled_from(_AWKWARD),
        st.text(_CHARS, min_size=1, max_size=6),
    )
    return st.lists(piece, min_size=1, max_size=5).map("".join).filter(lambda s: len(s) >= min_size)


def hostile_path() -> st.SearchStrategy[str]:
    """A model path: hostile, but not starting with '-' (the config refuses that)."""
    return hostile_text().map(lambda s: "./" + s if s.startswith("-") else s)


def hostile_env_values() -> st.SearchStrategy[dict[str, str]]:
    """Hostile values under valid names (HF_TOKEN-like ones included)."""
    names = st.sampled_from(["HOSTILE_A", "HOSTILE_B", "HF_TOKEN", "MY_API_KEY", "X"])
    return st.dictionaries(names, hostile_text(min_size=0), max_size=3)


# sglang flags that take a free string and that neither specsweep nor the simulator
# interprets at startup: hostile values can ride on them through a real launch.
FREE_STRING_FLAGS = ("--tokenizer-path", "--revision", "--speculative-token-map")


def hostile_extra_args() -> st.SearchStrategy[list[str]]:
    """`--flag value` or `--flag=value` (which lets a value start with dashes)."""
    flag = st.sampled_from(FREE_STRING_FLAGS)
    joined = st.tuples(flag, hostile_text(min_size=0)).map(lambda t: [f"{t[0]}={t[1]}"])
    split = st.tuples(flag, hostile_path()).map(list)
    return st.lists(st.one_of(joined, split), max_size=2).map(
        lambda parts: [a for p in parts for a in p]
    )
