"""Fail when the demo's answer is not what issue 28 promises a new user: at most 30
lines, none wider than 100 columns. Reads the demo's output on stdin; the answer runs
from its headline ("Deploy ..." or "At <shape>: Deploy ...") to the report's path.
Prefect's own log lines (a timestamp, then "|") are not the answer's."""

from __future__ import annotations

import re
import sys

LINES, COLUMNS = 30, 100
PREFECT_LOG = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \| ")
HEADLINE = re.compile(r"^(At \S+: )?Deploy ")

out = [ln.rstrip("\n") for ln in sys.stdin if not PREFECT_LOG.match(ln)]
starts = [i for i, ln in enumerate(out) if HEADLINE.match(ln)]
if not starts:
    sys.exit("demo: no answer (no line starting with 'Deploy ') in its output")
answer = out[starts[-1] :]
ends = [i for i, ln in enumerate(answer) if ln.startswith("report:")]
answer = answer[: ends[0] + 1] if ends else answer
wide = [ln for ln in answer if len(ln) > COLUMNS]
print(f"demo answer: {len(answer)} lines, widest {max(map(len, answer))} columns")
if len(answer) > LINES or wide:
    print("\n".join(answer))
    sys.exit(f"demo: the answer must fit {LINES} lines of {COLUMNS} columns; wider: {wide}")
