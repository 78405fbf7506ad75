"""What a failing sglang server was doing and why it failed, read from its log tail.

A launch failure is reported in one line that names the startup phase and the root
cause, so ``runs.variant_errors``, the CLI and the answer say *why* a variant failed
(the log tail stays attached below it). Both are read from the text sglang writes:

* the phase is the newest phase marker among the log lines (sglang 0.5.23 strings,
  matched loosely enough for older releases and the simulator), see `PHASE_MARKERS`;
* the cause is the most specific error line: the exception line that ends a Python
  traceback (``torch.OutOfMemoryError: CUDA out of memory. ...``, a bare
  ``AssertionError`` with the statement that failed), then uvicorn's and NCCL's error
  lines, then sglang's generic ones (``Received sigquit from a child process``); the
  newest wins among equals. Traceback frames and HTTP access lines never count.

Pure functions of the lines: no I/O, no engine imports, so they run on the target
host (the agent) and on the orchestrator alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# --- phases -------------------------------------------------------------------------
STARTING = "starting"
LOADING_WEIGHTS = "loading weights"
ALLOCATING_KV_CACHE = "allocating the KV cache"
INIT_ATTENTION = "initializing the attention backends"
CAPTURING_CUDA_GRAPHS = "capturing CUDA graphs"
FINISHING_STARTUP = "finishing startup"
STARTING_HTTP = "starting the HTTP server"
WARMING_UP = "warming up"
SERVING = "serving"

# (pattern, phase entered when the line is printed). Sources: sglang 0.5.23 under
# sglang/srt/ unless noted; uvicorn 0.54 for the uvicorn lines sglang lets through.
PHASE_MARKERS: tuple[tuple[re.Pattern[str], str], ...] = (
    # model_executor/model_runner.py:1274 "Load weight begin. avail mem=..."
    (re.compile(r"\bLoad weight begin\b"), LOADING_WEIGHTS),
    # model_loader/weight_utils.py:1166 and :1371 (tqdm bars while reading shards)
    (re.compile(r"Loading safetensors checkpoint shards|Multi-thread loading shards"),
     LOADING_WEIGHTS),
    # model_runner_components/startup_weight_load.py:538: the deferred real weights
    # are committed after graph capture; what is left is the scheduler's wrap-up
    (re.compile(r"\bLoad weight end\. Committed real weights"), FINISHING_STARTUP),
    # model_executor/model_runner.py:1373 "Load weight end. elapsed=..., type=..."
    # (the scheduler then sizes and allocates the KV cache pools)
    (re.compile(r"\bLoad weight end\b"), ALLOCATING_KV_CACHE),
    # mem_cache/memory_pool.py:2088/:2096 "KV Cache is allocated. dtype: ..., #tokens"
    # ("KV Cache VA upper bound." with post-capture resizing; :3586 "KV Cache skipped")
    # and mem_cache/kv_cache_configurator.py:499 "Memory pool end. avail mem=..."
    # (managers/scheduler.py:1115 then initializes the attention backends)
    (re.compile(r"\bKV Cache (?:is allocated|VA upper bound|skipped)\b|\bMemory pool end\b"),
     INIT_ATTENTION),
    # model_runner_components/cuda_graph_setup.py:685 "Capture target prefill CUDA graph
    # begin.", :759 "Capture target decode CUDA graph begin.", speculative/
    # eagle_worker_v2.py:515/:634 "Capture draft decode/extend CUDA graph begin.",
    # frozen_kv_mtp_worker_v2.py:396; older sglang: "Capture cuda graph begin."
    (re.compile(r"\bCapture\b.*\bgraph begin\b", re.IGNORECASE), CAPTURING_CUDA_GRAPHS),
    # model_executor/runner/decode_cuda_graph_runner.py:1343 (tqdm bar per batch size)
    (re.compile(r"\bCapturing batches \("), CAPTURING_CUDA_GRAPHS),
    # cuda_graph_setup.py:696/:788, eagle_worker_v2.py:533/:654 "... CUDA graph end."
    (re.compile(r"\bCapture\b.*\bgraph end\b", re.IGNORECASE), FINISHING_STARTUP),
    # managers/scheduler.py:1269 "max_total_num_tokens=..., chunked_prefill_size=..."
    (re.compile(r"\bmax_total_num_tokens=\d+, chunked_prefill_size="), FINISHING_STARTUP),
    # uvicorn server.py:101 "Started server process [pid]", lifespan/on.py:48/:62
    # "Waiting for application startup." / "Application startup complete." (before bind)
    (re.compile(r"\bStarted server process \[|\bWaiting for application startup\b"
                r"|\bApplication startup complete\b"), STARTING_HTTP),
    # uvicorn config.py:608 "Uvicorn running on http://..." (port bound), then
    # entrypoints/http_server.py:2384/:2533 "Initialization failed. warmup error: ..."
    (re.compile(r"\bUvicorn running on\b|\bInitialization failed\. warmup error\b"),
     WARMING_UP),
    # entrypoints/http_server.py:2600
    (re.compile(r"The server is fired up and ready to roll!"), SERVING),
)  # fmt: skip


def phase_of(lines: Iterable[str]) -> str | None:
    """The phase the newest marker among `lines` entered; None when none is there."""
    phase = None
    for line in lines:
        if _ACCESS_LOG.search(line):
            continue  # a request path could hold anything
        for pattern, marked in PHASE_MARKERS:
            if pattern.search(line):
                phase = marked
                break
    return phase


class PhaseTracker:
    """Remembers the newest phase across successive, overlapping log tails.

    A long traceback can push the last marker out of a short tail; the marker was
    seen by an earlier poll, so the phase survives. Any tail that holds a marker
    holds the newest one (markers after it would be in it too).
    """

    def __init__(self) -> None:
        self.phase: str | None = None

    def feed(self, lines: Iterable[str]) -> str | None:
        found = phase_of(lines)
        if found is not None:
            self.phase = found
        return self.phase


# --- causes -------------------------------------------------------------------------
MAX_CAUSE_CHARS = 240  # of the error line itself; whole sentences where they fit
MAX_LINE_CHARS = 160  # of a quoted last line

# Specificity of a candidate; the highest wins, the newest among equals.
_GENERIC, _OTHER, _EXCEPTION = 1, 2, 3

_ACCESS_LOG = re.compile(r'"(GET|POST|HEAD|PUT|DELETE|OPTIONS|PATCH) /\S* HTTP/')
# sglang: "[2026-01-02 03:04:05 TP0] ", "[2026-01-02 03:04:05.123 DP0 TP1] "
# (utils/common.py:2630); uvicorn via sglang: "[2026-01-02 03:04:05] ERROR:    "
# (utils/common.py:3512). Only the first line of a multi-line record has it.
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]*\]\s?")
_LEVEL = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
# The line that ends a traceback: a (dotted) exception name, then ": message" or nothing.
_EXC_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
# An exception line met outside a traceback (its frames cut off by the tail).
_LOOSE_EXC = re.compile(
    r"^(?P<name>(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?::\s?(?P<msg>.*))?$"
)
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# managers/scheduler.py:6372 "Scheduler hit an exception: <traceback>", likewise
# detokenizer_manager.py:566, tokenizer_manager.py:4043, data_parallel_controller.py:1011
_HIT = re.compile(r"\b(?P<who>\w+) hit an exception:")
# entrypoints/engine.py:1978 (the launcher, after a child died)
_SIGQUIT = "Received sigquit from a child process"
_NCCL_WARN = re.compile(r"\bNCCL WARN\b\s*(?P<msg>.*)")
# Exception lines that only point elsewhere: kept as a last resort.
_GENERIC_EXC = ("KeyboardInterrupt", "SystemExit")
_GENERIC_MSG = (
    "please see the error messages above",  # entrypoints/engine.py:2032
    "it usually means the child failed",
)
_DEMOTED_MSG = ("scheduler died during initialization",)  # entrypoints/engine.py:2006
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")
_OWN_LINE = "# specsweep"  # our launch header (targets/local.py), not the server's


@dataclass(frozen=True)
class Cause:
    """The error line chosen from a log tail, already shortened to one line."""

    text: str
    score: int
    index: int  # line number in the tail


@dataclass
class _Exc:
    """An exception line being read, with what follows it."""

    name: str
    msg: str
    index: int
    frame: tuple[str, str] | None = None  # (where, code) of the frame that raised
    loose: bool = False  # met without its traceback
    needs_msg: bool = False  # "Name:" with the message on the next line
    last_error: str = ""
    wants_last_error: bool = False

    def add(self, line: str) -> None:
        """One continuation line of the message; only a few are worth keeping."""
        if self.wants_last_error:
            self.last_error, self.wants_last_error = line, False
        elif line == "Last error:":  # NCCL's detail follows (torch's NCCLUtils)
            self.wants_last_error = True
        elif self.needs_msg:
            self.msg, self.needs_msg = line, False

    def cause(self) -> Cause:
        if self.msg:
            text = _sentences(f"{self.name}: {self.msg}", MAX_CAUSE_CHARS)
        else:
            text = self.name
            if self.frame is not None:
                where, code = self.frame
                if code.endswith(("(", "[", "{")):
                    code += "…"  # a statement over several lines: only its first is shown
                text += f" at {where}" + (f": {_clip(code, 80)}" if code else "")
        if self.last_error:
            text += f"; last error: {_clip(self.last_error, MAX_LINE_CHARS)}"
        low = text.lower()
        if self.name.rsplit(".", 1)[-1] in _GENERIC_EXC or any(g in low for g in _GENERIC_MSG):
            score = _GENERIC
        elif self.loose or any(d in low for d in _DEMOTED_MSG):
            score = _OTHER
        else:
            score = _EXCEPTION
        return Cause(_one_line(text), score, self.index)


def _exc(
    m: re.Match[str], index: int, frame: tuple[str, str] | None = None, loose: bool = False
) -> _Exc:
    msg = m["msg"]
    needs_msg = msg is not None and not msg.strip()
    return _Exc(m["name"], (msg or "").strip(), index, frame, loose, needs_msg)


def find_cause(lines: Sequence[str]) -> Cause | None:
    """The most specific error in `lines` (see the module docstring); None if none."""
    found: list[Cause] = []
    state = "none"  # "traceback" after its header, "frames" in them, "message" after them
    frame: tuple[str, str] | None = None
    exc: _Exc | None = None

    def close() -> None:
        nonlocal exc
        if exc is not None:
            found.append(exc.cause())
            exc = None

    for index, raw in enumerate(lines):
        raw = raw.rstrip()
        if not raw.strip() or _ACCESS_LOG.search(raw) or raw.startswith(_OWN_LINE):
            continue
        prefix = _PREFIX.match(raw)
        body = raw[prefix.end() :] if prefix else raw
        level = _LEVEL.match(body)
        body = (body[level.end() :] if level else body).strip()
        if prefix:  # a new log record: whatever was being read has ended
            close()
            state = "none"
        if m := _FRAME.match(raw):
            close()
            state, frame = "frames", (_where(m["path"], m["line"]), "")
            continue
        if state == "frames" and raw[:1].isspace():
            if frame is not None and not frame[1] and not _is_caret(body):
                frame = (frame[0], body)
            continue
        if body.startswith(_CHAINED):
            close()
            state = "none"
            continue
        if "Traceback (most recent call last)" in body:
            close()
            if hit := _HIT.search(body):
                found.append(Cause(f"{hit['who']} hit an exception", _GENERIC, index))
            elif "warmup error" in body:
                found.append(Cause("the warmup request failed", _GENERIC, index))
            state, frame = "traceback", None
            continue
        if state == "frames":  # Python prints the exception right after the frames
            state = "none"
            if m := _EXC_LINE.match(body):
                exc, state = _exc(m, index, frame=frame), "message"
                continue
        if state == "message" and exc is not None:
            exc.add(body)
            continue
        state = "none"
        if _SIGQUIT in body:
            found.append(Cause(_one_line(body), _GENERIC, index))
        elif m := _NCCL_WARN.search(body):
            found.append(Cause(_clip(f"NCCL WARN {m['msg']}", MAX_CAUSE_CHARS), _OTHER, index))
        elif level and level["level"] in ("ERROR", "CRITICAL"):
            # uvicorn: "[Errno 98] error while attempting to bind on address ...", exit 3
            found.append(Cause(_sentences(body, MAX_CAUSE_CHARS), _OTHER, index))
        elif m := _LOOSE_EXC.match(body):
            exc, state = _exc(m, index, loose=True), "message"
    close()
    if not found:
        return None
    return max(found, key=lambda c: (c.score, c.index))


def describe_cause(lines: Sequence[str]) -> str:
    """The cause as one line, or what the log shows when it holds no error."""
    cause = find_cause(lines)
    if cause is not None:
        return cause.text
    last = last_server_line(lines)
    if last:
        return f"no error in the log; last line: {_clip(last, MAX_LINE_CHARS)}"
    if any(_ACCESS_LOG.search(line) for line in lines):
        return "no error in the log; only HTTP access lines"
    return "the server wrote nothing to its log"


def last_server_line(lines: Sequence[str]) -> str:
    """The newest line the server wrote, its timestamp dropped ('' when none)."""
    for raw in reversed(lines):
        if not raw.strip() or _ACCESS_LOG.search(raw) or raw.startswith(_OWN_LINE):
            continue
        prefix = _PREFIX.match(raw)
        return _one_line(raw[prefix.end() :] if prefix else raw)
    return ""


# --- helpers ------------------------------------------------------------------------
def _where(path: str, line: str) -> str:
    """A frame's file, shortened to the package path: sglang/srt/server_args.py:1160."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
            break
    else:
        path = "/".join(path.split("/")[-3:])
    return f"{path}:{line}"


def _is_caret(text: str) -> bool:
    return bool(text) and set(text) <= set("^~ ")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _sentences(text: str, limit: int) -> str:
    """Whole sentences up to `limit` characters (at least the first, clipped)."""
    text = _one_line(text)
    if len(text) <= limit:
        return text
    parts = _SENTENCE_END.split(text)
    kept = parts[0]
    for part in parts[1:]:
        if len(kept) + 1 + len(part) > limit:
            break
        kept += " " + part
    return _clip(kept, limit) + ("" if len(kept) > limit else " …")


__all__ = [
    "ALLOCATING_KV_CACHE",
    "CAPTURING_CUDA_GRAPHS",
    "FINISHING_STARTUP",
    "INIT_ATTENTION",
    "LOADING_WEIGHTS",
    "PHASE_MARKERS",
    "SERVING",
    "STARTING",
    "STARTING_HTTP",
    "WARMING_UP",
    "Cause",
    "PhaseTracker",
    "describe_cause",
    "find_cause",
    "last_server_line",
    "phase_of",
]
