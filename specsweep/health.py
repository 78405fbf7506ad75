"""Wait for an sglang server to become ready, and fail fast when it dies.

sglang's HTTP port refuses connections while weights load, then ``/health``
answers 503 during the internal warmup and 200 after. Readiness is proven by
one real one-token generation. Every poll also checks the process, so a
crash during loading fails at once with the log tail instead of after the
timeout the seeds' 15-minute curl loops waited out.
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
    with requests.Session() as session:
        session.trust_env = False  # a proxy must never answer for a loopback server
        while True:
            if not is_alive():
                raise ServerDiedError(
                    f"server process exited after {time.monotonic() - start:.1f}s "
                    f"while {state or Readiness.REFUSED} ",
                    tail_log(30),
                )
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
            line = _latest_progress_line(tail_log(10))
            if on_progress and line != last_line:
                on_progress(state, line)
            last_line = line
            if now >= deadline:
                raise ServerStartTimeout(
                    f"server not ready after {timeout_s:.0f}s (last state: {state})",
                    tail_log(30),
                )
            _sleep_watching(min(delay, max(0.0, deadline - now)), is_alive)
            delay = min(delay * 1.5, poll_max_s)
