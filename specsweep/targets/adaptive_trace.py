"""What an adaptive server really ran, read from its log.

sglang reports no per-request step count, but its speculative worker logs every
change of the active one (``apply_runtime_state`` in
``srt/speculative/eagle_worker_v2.py``, 0.5.23)::

    [2026-12-01 23:18:01.123 TP0] Switch adaptive runtime state: steps 1 -> 0, draft_tokens 2 -> 1

A level's share of time at each step count is therefore the time between those
lines, over the log written while the level ran. specsweep reads the log by byte
offsets (what was written since the last read), so the segment of a level holds its
warmup requests too; they run at the same concurrency and route the same way.
Timestamps carry milliseconds because specsweep sets ``SGLANG_LOG_MS=1`` for adaptive
variants; with whole seconds the shares are coarser, never wrong in kind. The log
also says when sglang refused adaptive speculation and ran static params instead:
`fallback_reason` finds that line, so the variant fails instead of being measured
under a false name.
"""

from __future__ import annotations

import re
from datetime import datetime

_LINE = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)(?:[^\]]*)\] (?P<msg>.*)$"
)
_SWITCH = re.compile(r"Switch adaptive runtime state: steps (\d+) -> (\d+)")
_INITIALIZED = re.compile(r"AdaptiveSpeculativeParams initialized: steps=(\d+)")
_FALLBACK = re.compile(r"speculative_adaptive disabled: (.*?)\. Falling back to static")


def fallback_reason(text: str) -> str | None:
    """sglang's reason for running static params although adaptive was asked, if logged."""
    match = _FALLBACK.search(text)
    return match.group(1) if match else None


def adaptive_initialized(text: str) -> bool:
    """Did the server start its adaptive controller (the line it logs at startup)?"""
    return _INITIALIZED.search(text) is not None


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text)


class AdaptiveTrace:
    """Follows one adaptive server's log across levels: the active step count, and per
    level the share of time at each step count.

    Feed it the log in pieces as read (by byte offsets); a line cut by a read is kept
    until the rest arrives.
    """

    def __init__(self, initial_steps: int) -> None:
        self.steps = initial_steps  # the active step count after everything fed so far
        self.switches = 0  # how many switch lines were seen (all levels)
        self._partial = ""

    def _lines(self, text: str) -> list[str]:
        data = self._partial + text
        lines = data.split("\n")
        self._partial = lines.pop()  # "" when the text ended with a newline
        return lines

    def skip(self, text: str) -> None:
        """Consume log written outside a level (startup, between levels): only the state."""
        for line in self._lines(text):
            match = _SWITCH.search(line)
            if match:
                self.steps = int(match.group(2))
                self.switches += 1

    def level_shares(self, text: str) -> dict[int, float] | None:
        """Share of time at each step count over one level's log segment.

        The state at the segment's first timestamped line is the one carried in; each
        switch line moves it; the segment ends at its last timestamped line. None when
        the segment has no timestamped line (nothing was logged: no trace to read).
        """
        stamped = [m for m in map(_LINE.match, self._lines(text)) if m is not None]
        # uvicorn's lines keep whole seconds when the scheduler's carry milliseconds: a
        # clock of coarser grain would run backwards between them, so it is left out
        if any("." in m.group("ts") for m in stamped):
            stamped = [m for m in stamped if "." in m.group("ts")]
        events: list[tuple[datetime, int | None]] = []
        for match in stamped:
            switch = _SWITCH.search(match.group("msg"))
            when = _timestamp(match.group("ts"))
            events.append((when, int(switch.group(2)) if switch else None))
        if not events:
            return None
        durations: dict[int, float] = {}
        state, since = self.steps, events[0][0]
        for when, new in events:
            if new is None:
                continue
            durations[state] = durations.get(state, 0.0) + (when - since).total_seconds()
            state, since = new, when
            self.switches += 1
        durations[state] = durations.get(state, 0.0) + (events[-1][0] - since).total_seconds()
        self.steps = state
        total = sum(durations.values())
        if total <= 0:  # everything within one timestamp: the state(s) seen, equally
            seen = sorted(durations)
            return {s: 1.0 / len(seen) for s in seen}
        return {s: d / total for s, d in sorted(durations.items()) if d > 0}
