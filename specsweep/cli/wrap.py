"""Text for a terminal of 100 columns: sentences wrapped at words, shell commands at
their arguments with a trailing backslash, so a copied command still runs as one."""

from __future__ import annotations

import shlex
import textwrap

WIDTH = 100
_INDENT = "    "


def sentence_lines(text: str, width: int = WIDTH, indent: str = "  ") -> str:
    """``text`` wrapped at words, continuation lines indented."""
    return textwrap.fill(
        text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _arguments(command: str) -> list[str]:
    """The command's words, each flag joined to its value (``--tp-size 1`` stays on one
    line), each re-quoted as the shell needs it."""
    words = [shlex.quote(w) for w in shlex.split(command)]
    joined: list[str] = []
    for word in words:
        if (
            joined
            and joined[-1].startswith("--")
            and " " not in joined[-1]
            and (not word.startswith("-"))
        ):
            joined[-1] = f"{joined[-1]} {word}"
        else:
            joined.append(word)
    return joined


def command_lines(prefix: str, command: str, width: int = WIDTH) -> str:
    """``prefix`` then ``command``, broken between arguments with `` \\`` so that every
    line fits ``width`` where an argument does; the shell reads the lines as the one
    command. An argument wider than a line gets its own line, never cut."""
    lines: list[str] = []
    line = prefix.rstrip()
    for arg in _arguments(command):
        lead = " " if line else ""
        if line and line != _INDENT.rstrip() and len(line) + len(lead) + len(arg) + 2 > width:
            lines.append(f"{line} \\")
            line = _INDENT + arg
        else:
            line = f"{line}{lead}{arg}"
    lines.append(line)
    return "\n".join(lines)
