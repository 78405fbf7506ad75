"""Do the load generator's TTFT, ITL and TPOT match what the server actually did?

The stub (benchmarks/stub_server.py --precise) runs in its own process, sleeps
to absolute deadlines (first chunk 30 ms after the request, then one every
20 ms, of 1, 3 and 2 tokens in turn) and logs, for every chunk, the
``perf_counter`` just before and just after the ``sendall`` that wrote it. Both
processes read the same monotonic clock, so the client's stamps and the
stub's can be subtracted.

What "within 1 ms" means here, honestly:

* It is the client's error, not the stub's punctuality. The stub cannot send
  exactly on time on a busy 2-core machine (it wakes tens of microseconds
  late, sometimes milliseconds), and that lateness is server behaviour that
  the client should report, so the reference is the time a chunk was sent.
  A chunk's *stamp delay* is its client arrival stamp minus the end of the
  stub's ``sendall`` (on loopback the bytes are queued at the client by
  then), or zero when the client stamped it while ``sendall`` was still
  returning (the stub was preempted by the client it woke).
* TTFT error = the first chunk's stamp delay; ITL error = the change in stamp
  delay between consecutive chunks, split over the chunk's tokens like ITL
  itself; TPOT error = (last delay - first delay) / (tokens - 1).
* The 99th percentile of each |error| must be under 1 ms, at concurrency 1
  and 64. For TTFT the percentile is taken over the stamp delay of every
  chunk (the first chunk is one of them), since a few dozen requests cannot
  give a meaningful 99th percentile of their own.
* On Linux the client takes each read's arrival time from the kernel
  (``SO_TIMESTAMPNS``), so neither its own work (other streams' chunks, a
  burst of requests ending at once) nor the OS giving its CPU to another
  process makes a stamp late; on loopback that stamp falls inside the stub's
  ``sendall``, and the stamp delay is then zero. What the test guards is the
  rest: the clock conversion, which chunk and how many tokens each stamp is
  given, ITL's split over tokens, TPOT's end point. Each case runs three
  times against the same stub and the *median* of the three p99s is
  asserted (a read that comes without a kernel stamp is stamped at the read,
  which a busy machine delays). The client's CPU wait (time runnable but not
  running, from ``/proc/thread-self/schedstat``) and the raw arrival - send
  gaps are in the message for context.
* Without kernel stamps (not Linux) the test is skipped: user-space stamps
  are late by the client's own work, and at concurrency 64, when a wave of
  requests ends at once, that was measured at 1.4-5.5 ms at p99 on a 2-core
  machine; the client would not meet the bound.

Against the injected values (30 ms TTFT, 20 ms/n per token) the stub's own
lateness adds in; only the ITL median (robust to it) is asserted.
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Iterator

import pytest

from specsweep.config import LoadSpec
from specsweep.loadgen.http import kernel_timestamps
from specsweep.loadgen.metrics import RequestRecord, percentile
from specsweep.loadgen.prompts import level_seed, make_input_ids
from specsweep.loadgen.runner import run_level_sync
from tests.needs import missing
from tests.unit.loadgen.stub_util import stub_process

TTFT_MS, GAP_MS, CYCLE = 30.0, 20.0, (1, 3, 2)
OUTPUT_LEN = 12  # 6 chunks: 1, 3, 2, 1, 3, 2 tokens
BOUND_MS = 1.0
RUNS = 3


@pytest.fixture(scope="module")
def precise_stub() -> Iterator[str]:
    args = ["--precise", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(GAP_MS)]
    with stub_process(*args, "--tokens-per-chunk", ",".join(map(str, CYCLE))) as url:
        yield url


def fetch_log(url: str) -> list[dict]:
    """What the stub sent since the last fetch (fetching empties its log)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/stub/log", timeout=10) as resp:
        return json.loads(resp.read())


def stamp_delay(arrival: float, sent: float, done: float) -> float:
    """Seconds the client stamped a chunk after the stub's sendall returned (0 if during)."""
    return arrival - done if arrival > done else min(arrival - sent, 0.0)


def errors(records: list[RequestRecord], log: list[dict], load: LoadSpec, c: int) -> dict:
    """Per-sample errors (ms) of one run, and the differences to the injected values."""
    prompts = make_input_ids(len(records), load.input_len, level_seed(load.seed, c))
    by_key = {tuple(entry["key"]): entry for entry in log}
    keys = ("stamp", "ttft", "itl", "tpot", "itl_inj", "raw_gap")
    out: dict[str, list[float]] = {k: [] for k in keys}
    for r in records:
        sent = by_key[tuple(prompts[r.index][:8])]
        assert r.ok and len(sent["sent"]) == len(r.chunk_times) == 6, r.error
        assert r.chunk_tokens == CYCLE * 2
        d = [stamp_delay(*x) for x in zip(r.chunk_times, sent["sent"], sent["done"], strict=True)]
        out["stamp"] += [x * 1e3 for x in d]
        out["raw_gap"] += [(a - b) * 1e3 for a, b in zip(r.chunk_times, sent["sent"], strict=True)]
        out["ttft"].append(d[0] * 1e3)
        for k in range(1, len(d)):
            n = r.chunk_tokens[k]
            out["itl"] += [(d[k] - d[k - 1]) / n * 1e3] * n
            gap = (r.chunk_times[k] - r.chunk_times[k - 1]) / n * 1e3
            out["itl_inj"] += [gap - GAP_MS / n] * n
        out["tpot"].append((d[-1] - d[0]) / (OUTPUT_LEN - 1) * 1e3)
    return out


def p99_abs(values: list[float]) -> float:
    return percentile([abs(v) for v in values], 99)


def cpu_wait_ms() -> float:
    """How long this thread has waited for a CPU while runnable (0 where unknown)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


@pytest.mark.parametrize(("concurrency", "n_requests"), [(1, 4), (64, 128)])
def test_timings_match_what_was_sent(precise_stub: str, concurrency: int, n_requests: int) -> None:
    if not kernel_timestamps():
        missing("KERNEL_TIMESTAMPS", "no kernel arrival timestamps (SO_TIMESTAMPNS) here")
    load = LoadSpec(
        input_len=16, output_len=OUTPUT_LEN, requests_per_level=n_requests, request_timeout_s=30
    )
    runs, waits = [], []
    for _ in range(RUNS):
        fetch_log(precise_stub)  # start from an empty log
        before = cpu_wait_ms()
        result = run_level_sync(precise_stub, concurrency, load)
        waits.append(round(cpu_wait_ms() - before, 1))
        assert result.metrics.completed == n_requests
        runs.append(errors(list(result.records), fetch_log(precise_stub), load, concurrency))
    p99s = {k: [round(p99_abs(run[k]), 3) for run in runs] for k in runs[0]}
    medians = {k: [round(percentile(run[k], 50), 3) for run in runs] for k in runs[0]}
    figures = f"c={concurrency} cpu waits {waits} ms; p99 |x| ms {p99s}; medians {medians}"
    print(figures)  # pytest -s shows them
    assert statistics.median(p99s["stamp"]) < BOUND_MS, figures  # bounds the TTFT error
    for metric in ("itl", "tpot"):
        assert statistics.median(p99s[metric]) < BOUND_MS, figures
    assert abs(statistics.median(medians["itl_inj"])) < BOUND_MS, figures
