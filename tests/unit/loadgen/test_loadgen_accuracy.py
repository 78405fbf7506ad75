"""Do the load generator's TTFT, ITL and TPOT match what the server actually did?

The stub (benchmarks/stub_server.py --precise, in its own process) logs when it sent
every chunk; tests/unit/loadgen/accuracy.py turns the client's stamps and that log into
per-sample errors. What the client is answerable for is the clock conversion, which
chunk and how many tokens each stamp is given, ITL's split over tokens and TPOT's end
point; on Linux it takes each read's arrival time from the kernel (``SO_TIMESTAMPNS``),
so its own work and preemption do not make a stamp late, and on loopback the stamp falls
inside the stub's ``sendall`` (a stamp delay of zero).

What this test asserts holds on a preempted 2-core machine too:

* no chunk is measured before the injected time (30 ms after the request, then one every
  20 ms): the stub never sends early, so an earlier stamp is the client's mistake;
* the 99th percentile of each |error| is under 1 ms plus this machine's scheduling
  jitter during the same runs: the stub's own lateness (its ``sendall`` start minus its
  deadline), measured beside the client. A read that comes without a kernel stamp is
  stamped at the read, which a busy machine delays like it delays the stub. Each case
  runs three times against the same stub and the median of the three is asserted.

The claim "within 1 ms, at concurrency 1 and 64" on a quiet machine is measured by
``benchmarks/loadgen_accuracy.py``, beside the same jitter. Without kernel stamps (not
Linux) the test is skipped: user-space stamps are late by the client's own work (at
concurrency 64, when a wave of requests ends at once, 1.4-5.5 ms at p99 on 2 cores).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from specsweep.config import LoadSpec
from specsweep.loadgen.http import kernel_timestamps
from specsweep.loadgen.metrics import percentile
from specsweep.loadgen.runner import run_level_sync
from tests.needs import missing
from tests.unit.loadgen.accuracy import (
    OUTPUT_LEN,
    STUB_ARGS,
    TTFT_MS,
    cpu_wait_ms,
    errors,
    p99_abs,
    sent_entries,
)
from tests.unit.loadgen.stub_util import stub_process

BOUND_MS = 1.0
RUNS = 3


@pytest.fixture(scope="module")
def precise_stub() -> Iterator[str]:
    with stub_process(*STUB_ARGS) as url:
        yield url


@pytest.mark.parametrize(("concurrency", "n_requests"), [(1, 4), (64, 128)])
def test_timings_match_what_was_sent(precise_stub: str, concurrency: int, n_requests: int) -> None:
    if not kernel_timestamps():
        missing("KERNEL_TIMESTAMPS", "no kernel arrival timestamps (SO_TIMESTAMPNS) here")
    load = LoadSpec(
        input_len=16, output_len=OUTPUT_LEN, requests_per_level=n_requests, request_timeout_s=30
    )
    runs, waits, first = [], [], []
    for _ in range(RUNS):
        before = cpu_wait_ms()
        result = run_level_sync(precise_stub, concurrency, load)
        waits.append(round(cpu_wait_ms() - before, 1))
        assert result.metrics.completed == n_requests
        records = list(result.records)
        runs.append(errors(records, sent_entries(precise_stub, records, load, concurrency)))
        first += [(r.chunk_times[0] - r.start) * 1e3 for r in records]
    p99s = {k: [round(p99_abs(run[k]), 3) for run in runs] for k in runs[0]}
    medians = {k: [round(percentile(run[k], 50), 3) for run in runs] for k in runs[0]}
    jitter = statistics.median(p99s["late"])
    tolerance = BOUND_MS + jitter
    figures = (
        f"c={concurrency} tolerance {tolerance:.3f} ms (stub lateness p99 {p99s['late']}); "
        f"cpu waits {waits} ms; p99 |x| ms {p99s}; medians {medians}"
    )
    print(figures)  # pytest -s shows them
    # Against the injected schedule: never sooner than the stub could send (the clock
    # conversion may err by the tolerance, not by more).
    assert min(first) >= TTFT_MS - tolerance, figures
    assert min(min(run["raw_gap"]) for run in runs) >= -tolerance, figures
    # Against what was sent, within the machine's own jitter.
    for metric in ("stamp", "itl", "tpot"):  # stamp bounds the TTFT error
        assert statistics.median(p99s[metric]) <= tolerance, (metric, figures)
    assert abs(statistics.median(medians["itl_inj"])) <= tolerance, figures
