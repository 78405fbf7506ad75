"""Wait for an sglang server to become ready, and fail fast when it dies.

sglang's HTTP port refuses connections while weights load, then ``/health``
answers 503 during the internal warmup and 200 after. Readiness is proven by
one real one-token generation. Every poll also checks the process, so a
crash during loading fails at once with the log tail instead of after the
timeout the seeds' 15-minute curl loops waited out.

The error's first line says what the server was doing and why it failed, both read
from its log (`specsweep.targets.log_cause`) and what the probe saw::

    server process exited while loading weights after 1.2s: torch.OutOfMemoryError: ...
    server not ready after 900s (last state: refused) while loading weights: no error
        in the log; last line: Load weight begin. avail mem=78.50 GB

The log tail follows it as before (`ServerStartError`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import requests

from specsweep.errors import ServerDiedError, ServerStartTimeout
from specsweep.targets import log_cause

log = logging.getLogger(__name__)


class Readiness(StrEnum):
    REFUSED = "refused"  # port closed: loading weights, capturing CUDA graphs
    WARMING = "warming"  # /health answers 503 (or another non-200)
    HEALTHY = "healthy"  # /health answers 200
    READY = "ready"  # a one-token generation succeeded


@dataclass
class ReadyReport:
    elapsed_s: float
    polls: int
    transitions: list[tuple[float, Readiness]] = field(default_factory=list)


def probe_health(session: requests.Session, base_url: str, timeout_s: float) -> Readiness:
    try:
        resp = session.get(f"{base_url}/health", timeout=timeout_s)
    except requests.ConnectionError:
        return Readiness.REFUSED
    except requests.Timeout:
        return Readiness.WARMING
    return Readiness.HEALTHY if resp.status_code == 200 else Readiness.WARMING


def probe_generation(session: requests.Session, base_url: str, timeout_s: float) -> bool:
    """One real token through /generate: the proof that the scheduler serves requests."""
    body = {
        "input_ids": [1000, 1001, 1002, 1003],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "stream": False,
    }
    try:
        resp = session.post(f"{base_url}/generate", json=body, timeout=timeout_s)
    except (requests.ConnectionError, requests.Timeout):
        return False
    if resp.status_code != 200:
        return False
    try:
        return int(resp.json()["meta_info"]["completion_tokens"]) >= 1
    except (ValueError, KeyError, TypeError):
        return False


_ACCESS_LOG = re.compile(r'"(GET|POST|HEAD) /\S* HTTP/')
TAIL_LINES = 30  # of the log attached to an error (and searched for its cause)
SCAN_LINES = 200  # searched for the phase: a traceback can be longer than the tail


def _phase(log_phase: str | None, state: Readiness | None) -> str:
    """What the server was doing: the probe's view where it knows better than the log."""
    if log_phase == log_cause.SERVING or state in (Readiness.HEALTHY, Readiness.READY):
        return log_cause.SERVING
    if state == Readiness.WARMING:  # the port answers: past loading, in sglang's warmup
        return log_cause.WARMING_UP
    return log_phase or log_cause.STARTING


def died_message(
    elapsed_s: float, state: Readiness | None, tail: Sequence[str], phase: str | None
) -> str:
    """``server process exited while <phase> after <t>s: <cause>`` (one line)."""
    cause = log_cause.describe_cause(tail)
    return f"server process exited while {_phase(phase, state)} after {elapsed_s:.1f}s: {cause}"


def timeout_message(
    timeout_s: float, state: Readiness | None, tail: Sequence[str], phase: str | None
) -> str:
    """``server not ready after <N>s (last state: <s>) while <phase>: <cause>`` (one line)."""
    found = log_cause.find_cause(tail)
    cause = f"last error in the log: {found.text}" if found else log_cause.describe_cause(tail)
    return (
        f"server not ready after {timeout_s:.0f}s (last state: {state}) "
        f"while {_phase(phase, state)}: {cause}"
    )


def _final_tail(
    tail_log: Callable[[int], Sequence[str]], phases: log_cause.PhaseTracker
) -> tuple[list[str], str | None]:
    """The tail to attach, and the phase from a longer look back than it."""
    scan = list(tail_log(SCAN_LINES))
    return scan[-TAIL_LINES:], phases.feed(scan)


def _latest_progress_line(lines: Sequence[str]) -> str:
    """The newest log line that is not an HTTP access line (our own polls write those)."""
    for line in reversed(lines):
        if not _ACCESS_LOG.search(line):
            return line
    return ""


def _sleep_watching(seconds: float, is_alive: Callable[[], bool], slice_s: float = 0.1) -> None:
    """Sleep, but wake as soon as the process dies so the crash is reported at once."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(slice_s, left))
        if not is_alive():
            return


def wait_until_ready(
    base_url: str,
    *,
    is_alive: Callable[[], bool],
    tail_log: Callable[[int], Sequence[str]],
    timeout_s: float,
    poll_initial_s: float = 0.05,
    poll_max_s: float = 2.0,
    probe_timeout_s: float = 10.0,
    on_progress: Callable[[Readiness, str], None] | None = None,
) -> ReadyReport:
    """Poll until the server generates a token; raise ServerDiedError / ServerStartTimeout."""
    start = time.monotonic()
    deadline = start + timeout_s
    delay = poll_initial_s
    report = ReadyReport(0.0, 0)
    state: Readiness | None = None
    last_line = ""
    phases = log_cause.PhaseTracker()  # a long traceback can push the marker out of the tail
    with requests.Session() as session:
        session.trust_env = False  # a proxy must never answer for a loopback server
        while True:
            if not is_alive():
                elapsed = time.monotonic() - start
                tail, phase = _final_tail(tail_log, phases)
                raise ServerDiedError(died_message(elapsed, state, tail, phase), tail)
            report.polls += 1
            new_state = probe_health(session, base_url, probe_timeout_s)
            if new_state == Readiness.HEALTHY and probe_generation(
                session, base_url, probe_timeout_s
            ):
                new_state = Readiness.READY
            now = time.monotonic()
            if new_state != state:
                report.transitions.append((now - start, new_state))
                state = new_state
                delay = poll_initial_s  # a change is news: look again soon
            if state == Readiness.READY:
                report.elapsed_s = now - start
                return report
            recent = tail_log(10)
            phases.feed(recent)
            line = _latest_progress_line(recent)
            if on_progress and line != last_line:
                on_progress(state, line)
            last_line = line
            if now >= deadline:
                tail, phase = _final_tail(tail_log, phases)
                raise ServerStartTimeout(timeout_message(timeout_s, state, tail, phase), tail)
            _sleep_watching(min(delay, max(0.0, deadline - now)), is_alive)
            delay = min(delay * 1.5, poll_max_s)
