"""The load generator's ceiling: how many streamed tokens/s can it take in before it lags?

A client that cannot keep up does not fail, it under-reports: chunks queue in
its socket buffers and get stamped late, so ITL and throughput look like the
server's fault. This script streams from ``stub_server.py`` in its "as fast as
it can" mode (no sleeps, one token per chunk: the most chunks per token) at
several concurrencies, with the client pinned to 1 and to 2 CPUs
(``os.sched_setaffinity``; the stub gets the other CPUs when there are any,
otherwise it shares them, which the table says).

Reported per client and case: output tokens/s and requests/s as the client
measured them, and the client's CPU time per streamed token (user + sys of the
client and its worker processes, warmup and start-up included). On a shared
or small machine the CPU cost is the steadier number: 1e6 / (us per token) is
the rate one fully used core could absorb.

Clients are a registry, ``CLIENTS``: name -> function(Case) -> Measured.
``benchmarks/refclients.py``, when present, adds reference clients (sglang's
bench_serving, GuideLLM, ...) as ``CLIENTS`` of its own; they run side by side
in the same cases, and the table shows each one's throughput relative to
specsweep's. A reference function may also return a dict with ``tok_s`` and
``req_s`` (and optionally ``cpu_s``, ``note``) or a ``(tok_s, req_s)`` tuple.

    .venv/bin/python benchmarks/loadgen_ceiling.py [--levels 64,256,1024] [--cores 1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STUB = HERE / "stub_server.py"
sys.path.insert(0, str(HERE))  # refclients.py lives beside this file


@dataclass(frozen=True)
class Case:
    """One measurement: C closed-loop streams against the stub at url."""

    url: str
    concurrency: int
    num_requests: int
    input_len: int
    output_len: int
    cpus: tuple[int, ...]  # pin the client (and every process it starts) to these


@dataclass(frozen=True)
class Measured:
    tok_s: float  # output tokens/s, as the client itself reports it
    req_s: float
    cpu_s: float | None = None  # client CPU seconds over the whole run, when known
    tokens: int | None = None  # output tokens streamed in that CPU time (warmup included)
    note: str = ""

    @property
    def cpu_us_per_token(self) -> float | None:
        if self.cpu_s is None or not self.tokens:
            return None
        return self.cpu_s / self.tokens * 1e6


ClientFn = Callable[[Case], Any]


def _client_specsweep(args: argparse.Namespace) -> None:
    """Inside the pinned child: one level through run_level_sync, with its CPU cost."""
    from specsweep.config import LoadSpec
    from specsweep.loadgen.runner import run_level_sync

    load = LoadSpec(
        input_len=args.input_len, output_len=args.output_len, requests_per_level=args.requests
    )
    cpu0 = time.process_time()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run_level_sync(args.url, args.concurrency, load, workers=args.workers)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - cpu0
    cpu += (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    m = result.metrics
    warm = load.num_warmup(args.concurrency) * args.output_len
    print(
        json.dumps(
            {
                "tok_s": m.output_throughput,
                "req_s": m.request_throughput,
                "cpu_s": cpu,
                "tokens": m.output_tokens + warm,
                "failed": m.failed,
                "itl_p99_ms": m.itl_ms_p99,
            }
        )
    )


def _specsweep(workers: int | None) -> ClientFn:
    def run(case: Case) -> Measured:
        n_workers = workers or len(case.cpus)
        cmd = [sys.executable, __file__, "--as-client", "--url", case.url]
        cmd += ["--concurrency", str(case.concurrency), "--requests", str(case.num_requests)]
        cmd += ["--input-len", str(case.input_len), "--output-len", str(case.output_len)]
        cmd += ["--workers", str(n_workers), "--cpus", ",".join(map(str, case.cpus))]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
        data = json.loads(out.stdout.strip().splitlines()[-1])
        note = f"{n_workers} proc" + (f", {data['failed']} failed" if data["failed"] else "")
        return Measured(data["tok_s"], data["req_s"], data["cpu_s"], data["tokens"], note)

    return run


CLIENTS: dict[str, ClientFn] = {
    "specsweep": _specsweep(None),  # one process per client CPU
    "specsweep-1proc": _specsweep(1),  # the default: one event loop
}
try:
    from refclients import CLIENTS as REF_CLIENTS  # type: ignore[import-not-found]
except ImportError:
    REF_CLIENTS = {}


def _as_measured(value: Any) -> Measured:
    if isinstance(value, Measured):
        return value
    if isinstance(value, dict):
        return Measured(
            float(value["tok_s"]),
            float(value["req_s"]),
            value.get("cpu_s"),
            value.get("tokens"),
            str(value.get("note", "")),
        )
    tok_s, req_s = value
    return Measured(float(tok_s), float(req_s))


@contextmanager
def stub(cpus: tuple[int, ...]) -> Iterator[str]:
    """The stub on these CPUs, one process per CPU; yields its base URL."""
    cmd = [sys.executable, str(STUB), "--port", "0", "--processes", str(len(cpus))]
    cmd += ["--cpus", ",".join(map(str, cpus))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"stub did not start: {line!r}")
        time.sleep(0.3)  # the other stub processes bind their sockets
        yield line.split()[-1]
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)


def _layout(cores: int) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(client CPUs, stub CPUs, shared?) for a client of `cores` CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if cores > len(cpus):
        raise SystemExit(f"asked for {cores} client CPUs, this process may use {len(cpus)}")
    client, rest = tuple(cpus[:cores]), tuple(cpus[cores:])
    return client, rest or tuple(cpus), not rest


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--levels", default="64,256,1024")
    p.add_argument("--cores", default="1,2")
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--input-len", type=int, default=16)
    p.add_argument("--requests-per-stream", type=int, default=2)
    p.add_argument("--min-requests", type=int, default=256)
    p.add_argument("--clients", default="", help="comma list (default: all registered)")
    # Internal: the pinned child that runs specsweep's client.
    p.add_argument("--as-client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    p.add_argument("--cpus", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.as_client:
        os.sched_setaffinity(0, [int(c) for c in args.cpus.split(",")])
        _client_specsweep(args)
        return

    clients = {**CLIENTS, **REF_CLIENTS}
    if args.clients:
        clients = {k: clients[k] for k in args.clients.split(",")}
    header = f"{'C':>5} {'cores':>5} {'client':<22} {'tok/s':>9} {'req/s':>8} {'us/tok':>7} "
    print(header + f"{'x specsweep':>11}  note", flush=True)
    for cores in (int(c) for c in args.cores.split(",")):
        client_cpus, stub_cpus, shared = _layout(cores)
        with stub(stub_cpus) as url:
            for c in (int(x) for x in args.levels.split(",")):
                n = max(args.min_requests, args.requests_per_stream * c)
                case = Case(url, c, n, args.input_len, args.output_len, client_cpus)
                base: Measured | None = None
                for name, fn in clients.items():
                    try:
                        got = _as_measured(fn(case))
                    except Exception as exc:  # one client's failure is a row, not the end
                        print(f"{c:>5} {cores:>5} {name:<22} failed: {exc}", flush=True)
                        continue
                    base = got if name == "specsweep" else base
                    ratio = got.tok_s / base.tok_s if base and base.tok_s else None
                    note = got.note + ("; stub shares the CPUs" if shared else "")
                    print(
                        f"{c:>5} {cores:>5} {name:<22} {got.tok_s:>9,.0f} {got.req_s:>8,.1f} "
                        f"{_fmt(got.cpu_us_per_token, '.1f'):>7} {_fmt(ratio, '.2f'):>11}  {note}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
