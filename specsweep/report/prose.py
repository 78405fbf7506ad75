"""Text a person reads on an artifact page: sentences with their full stops, and no word
too long for the page's column.

The Prefect UI lays a Markdown artifact out in a column ~870 px wide at a 1440-px window
and breaks a line only at a space or a hyphen: a word longer than the column (a JSON
object with no spaces, a path, a long name) runs past it and is cut off, the page
scrolling sideways under it. `fit_text` gives every long word of a page's prose break
opportunities (``<wbr>``, which shows nothing and copies as nothing) after its
punctuation, so it wraps like a sentence; a long inline code span is cut into adjacent
spans with a break opportunity between them (inside backticks ``<wbr>`` would show).
Fenced code blocks are left whole (the UI scrolls them sideways), and so are tables
(report/artifacts.py fits them), link targets (a data: URI) and HTML tags.

`paragraph` joins notes into sentences, each capitalised and ended with a full stop.
"""

from __future__ import annotations

import re

from specsweep.report.caveats import sentence

# A word (no space) longer than this is given break opportunities: 40 characters of the
# UI's 14-px Inter are at most ~520 px (capitals), well inside the column, and a word as
# short as a variant name or a run id is left as it is.
LONG_WORD = 40
BREAK = "<wbr>"
# Break after these (never inside an HTML entity or a URL's scheme, so not after & or
# "://"); a word with none stays as it is, whatever its length.
_AFTER = frozenset(",;/=:")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
# What a prose line is made of: code spans, link targets, HTML tags and autolinks (kept
# whole, a code span cut into spans), and the text between them.
_TOKEN = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<body>.+?)(?P=ticks))"  # a code span
    r"|\]\([^)]*\)"  # a link's or an image's target
    r"|<[^>\s]+>"  # an HTML tag (<br>, <wbr>) or an autolink
)


def paragraph(*notes: str) -> str:
    """Notes as one paragraph of sentences: each capitalised (unless it starts with a name
    such as ``max_bs``) and ended with its full stop; empty notes left out."""
    return " ".join(sentence(n.strip()) for n in notes if n and n.strip())


def fit_text(markdown: str, longest: int = LONG_WORD) -> str:
    """The page with break opportunities in every word of its prose longer than `longest`
    characters (see the module); fenced code, tables and indented code untouched."""
    out: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            out.append(line)
        elif opened:
            fence = opened.group(1)
            out.append(line)
        elif line.lstrip().startswith("|") or _indented_code(line):
            out.append(line)
        else:
            out.append(_fit_line(line, longest))
    return "\n".join(out)


def _indented_code(line: str) -> bool:
    """A line indented as code (4 spaces or a tab) that is not a nested list item."""
    body = line.lstrip(" \t")
    indent = line[: len(line) - len(body)]
    nested = re.match(r"([-*+>]|\d+[.)])\s", body)
    return (indent.startswith("\t") or len(indent) >= 4) and not nested


def _fit_line(line: str, longest: int) -> str:
    parts: list[str] = []
    at = 0
    for token in _TOKEN.finditer(line):
        parts.append(_fit_words(line[at : token.start()], longest))
        if token.group("code") is not None:
            parts.append(_fit_code(token.group("ticks"), token.group("body"), longest))
        else:
            parts.append(token.group(0))
        at = token.end()
    parts.append(_fit_words(line[at:], longest))
    return "".join(parts)


def _fit_words(text: str, longest: int) -> str:
    return re.sub(r"\S+", lambda m: BREAK.join(_pieces(m.group(0), longest)), text)


def _fit_code(ticks: str, body: str, longest: int) -> str:
    """A code span, cut into adjacent spans where a word of it is too long."""
    if all(len(w) <= longest for w in body.split()):
        return f"{ticks}{body}{ticks}"
    words = re.split(r"(\s+)", body)
    spans, current = [], ""
    for word in words:
        pieces = _pieces(word, longest) if not word.isspace() else [word]
        current += pieces[0]
        for piece in pieces[1:]:
            spans.append(current)
            current = piece
    spans.append(current)
    pad = lambda s: f" {s} " if s.startswith("`") or s.endswith("`") else s  # noqa: E731
    return BREAK.join(f"{ticks}{pad(s)}{ticks}" for s in spans)


def _pieces(word: str, longest: int) -> list[str]:
    """The word cut after its punctuation so that no stretch of it between two places a
    line may break is longer than `longest` characters where it can be; the browser's own
    places (after a hyphen before a letter) count and are not cut. A stretch with no
    punctuation stays long; a short word, or one that holds a URL, stays whole."""
    if len(word) <= longest or "://" in word:
        return [word]
    cuts: list[int] = []
    line, last = 0, 0  # where the line may last break, and the latest place a cut may go
    for at in range(1, len(word) + 1):
        own = at < len(word) and word[at - 1] == "-" and word[at].isalpha()
        cut = at < len(word) and word[at - 1] in _AFTER
        if not (own or cut or at == len(word)):
            continue
        if at - line > longest and last > line:
            cuts.append(last)
            line = last
        if own:
            line = at
        elif cut:
            last = at
    return [word[a:b] for a, b in zip([0, *cuts], [*cuts, len(word)], strict=True)]
