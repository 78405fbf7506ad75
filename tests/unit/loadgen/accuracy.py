"""The load generator's timing error against the precise stub's send log, for the
accuracy test and benchmarks/loadgen_accuracy.py.

The stub (benchmarks/stub_server.py --precise) sleeps to absolute deadlines (first chunk
TTFT_MS after the request arrived, then one every GAP_MS, of 1, 3 and 2 tokens in turn)
and logs, per chunk, the ``perf_counter`` just before and just after the ``sendall``
that wrote it. Both processes read the same monotonic clock, so the client's stamps and
the stub's can be subtracted:

* stamp delay: a chunk's client arrival stamp minus the end of the stub's ``sendall``
  (on loopback the bytes are queued at the client by then), or zero when the client
  stamped it while ``sendall`` was still returning; negative if stamped before the send.
* TTFT error = the first chunk's stamp delay; ITL error = the change in stamp delay
  between consecutive chunks, split over the chunk's tokens like ITL itself; TPOT error
  = (last delay - first delay) / (tokens - 1).
* The stub's lateness, its ``sendall`` start minus its deadline, is this machine's
  scheduling jitter while the level ran: a process sleeping to exact deadlines on the
  same CPUs, woken late by whatever else runs there.
"""

from __future__ import annotations

import json
import time
import urllib.request

from specsweep.config import LoadSpec
from specsweep.loadgen.metrics import RequestRecord, percentile
from specsweep.loadgen.prompts import level_seed, make_input_ids

TTFT_MS, GAP_MS, CYCLE = 30.0, 20.0, (1, 3, 2)
OUTPUT_LEN = 12  # 6 chunks: 1, 3, 2, 1, 3, 2 tokens
STUB_ARGS = ("--precise", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(GAP_MS),
             "--tokens-per-chunk", ",".join(map(str, CYCLE)))  # fmt: skip
METRICS = ("stamp", "ttft", "itl", "tpot", "itl_inj", "raw_gap", "late")


def fetch_log(url: str) -> list[dict]:
    """What the stub sent since the last fetch (fetching empties its log)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/stub/log", timeout=10) as resp:
        return json.loads(resp.read())


def sent_entries(
    url: str, records: list[RequestRecord], load: LoadSpec, c: int, timeout_s: float = 30
) -> dict[int, dict]:
    """The stub's log entry of each measured request, by record index.

    An entry is matched by the request's first 8 input ids and by arriving while the
    request ran (every run of a level sends the same prompts). The stub logs a stream
    after its last ``sendall`` returns, which can be after the client has read that
    chunk and moved on: this waits for every entry. Entries of other requests (the
    warmup) are dropped.
    """
    prompts = make_input_ids(len(records), load.input_len, level_seed(load.seed, c))
    by_key = {tuple(prompts[r.index][:8]): r for r in records}
    found: dict[int, dict] = {}
    deadline = time.monotonic() + timeout_s
    while len(found) < len(records) and time.monotonic() < deadline:
        for entry in fetch_log(url):
            r = by_key.get(tuple(entry["key"]))
            if r is not None and r.start <= entry["arrived"] <= r.end:
                found[r.index] = entry
        if len(found) < len(records):
            time.sleep(0.05)
    missing = sorted({r.index for r in records} - set(found))
    assert not missing, f"the stub logged no send for requests {missing} in {timeout_s} s"
    return found


def stamp_delay(arrival: float, sent: float, done: float) -> float:
    """Seconds the client stamped a chunk after the stub's sendall returned (0 if during)."""
    return arrival - done if arrival > done else min(arrival - sent, 0.0)


def errors(records: list[RequestRecord], entries: dict[int, dict]) -> dict:
    """Per-sample errors (ms) of one run, the differences to the injected values, and
    the stub's lateness; `entries` from `sent_entries`."""
    out: dict[str, list[float]] = {k: [] for k in METRICS}
    for r in records:
        sent = entries[r.index]
        assert r.ok and len(sent["sent"]) == len(r.chunk_times) == 6, r.error
        assert r.chunk_tokens == CYCLE * 2
        d = [stamp_delay(*x) for x in zip(r.chunk_times, sent["sent"], sent["done"], strict=True)]
        out["stamp"] += [x * 1e3 for x in d]
        out["raw_gap"] += [(a - b) * 1e3 for a, b in zip(r.chunk_times, sent["sent"], strict=True)]
        out["late"] += [
            (s - sent["arrived"]) * 1e3 - (TTFT_MS + k * GAP_MS) for k, s in enumerate(sent["sent"])
        ]
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
