"""How long does a flow run wait for a process worker, on a SQLite- or PostgreSQL-backed
Prefect server?

A fleet sweep runs each variant as its own flow run through `run_deployment`; this is
the overhead each such run pays before its code runs. The script starts, side by side, a
Prefect server on SQLite and one on PostgreSQL (a cluster from Debian's packages on
127.0.0.1: tests/postgres.py, tests/prefect_server.py), deploys a flow that does nothing
to a process work pool on each, and for every worker poll interval (--query-seconds,
PREFECT_WORKER_QUERY_SECONDS) and worker count (--workers) starts that many
`prefect worker start` processes and submits flow runs with `run_deployment(timeout=0)`,
in two modes:

    serial  --serial-runs runs, one at a time (the next once the last is final): the
            latency a lone run sees, as a fleet host's worker running one variant at once
    burst   --runs runs at once: how fast the server and workers drain a queue (every
            worker starts what it claims at once unless --limit caps it)

From each run's state history it reports, per backend (median, p90, max, in seconds):

    run_deployment()   the client call that creates the run (two API requests)
    create→Pending     the worker's poll: until a worker claims the run
    Pending→Running    the worker starts `python -m prefect.engine`, which loads the flow
    create→Running     the scheduling latency: what a run waits before its code runs
    Running→Completed  the (empty) flow body and the engine's bookkeeping
    create→Completed   the whole round trip

plus, for bursts, the time to create all runs and until the last was final; each
server's start time on a fresh database (migrations included); the machine's load
average; and the PostgreSQL/SQLite ratio. Trials run one after another (both servers stay
up), so they never share CPUs with each other. --idle-workers K adds K workers polling an
empty pool every second during each trial: the server's load from 10*K hosts at the
default 10 s. It counts the ERROR lines each server logs during a trial, with
PREFECT_SERVER_LOG_RETRYABLE_ERRORS on so that requests answered 503 (SQLite's "database
is locked", which clients retry) are logged too; --keep keeps the logs.

    .venv/bin/python benchmarks/scheduling_latency.py       # ~35 min on 2 cores
    .venv/bin/python benchmarks/scheduling_latency.py --modes burst --runs 10 --limit 1
    .venv/bin/python benchmarks/scheduling_latency.py --modes serial --workers 1 \\
        --query-seconds 1 --idle-workers 20 --json latency.json --keep

Needs PostgreSQL's server binaries (apt-get install postgresql); runs as root too (the
cluster then runs as the `postgres` user). Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.postgres import MISSING, find_bin_dir, postgres_cluster  # noqa: E402
from tests.prefect_server import (  # noqa: E402
    BIN,
    PrefectServer,
    prefect_server,
    start_process,
    stop_process,
)

POOL = "latency"
IDLE_POOL = "idle"  # --idle-workers poll it: the server's load from hosts with nothing to do
DEPLOYMENT = "noop/noop"
FLOW_FILE = '''from prefect import flow


@flow(name="noop")
def noop() -> None:
    """Nothing: what is left of a run is Prefect's own overhead."""
'''
# Prefect answers a request that hit a retryable database error (SQLite's lock) with 503
# and logs nothing unless asked: ask, to count them.
LOG_EVERY_ERROR = {"PREFECT_SERVER_LOG_RETRYABLE_ERRORS": "true"}
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
METRICS = {
    "create→Pending": ("created", "PENDING"),
    "Pending→Running": ("PENDING", "RUNNING"),
    "create→Running": ("created", "RUNNING"),
    "Running→Completed": ("RUNNING", "COMPLETED"),
    "create→Completed": ("created", "COMPLETED"),
}


@dataclass
class Trial:
    backend: str
    mode: str  # serial | burst
    query_seconds: int
    workers: int
    runs: int
    create_s: float  # all the run_deployment() calls together
    drain_s: float  # from the first creation until the last run is final
    load: float  # the machine's 1-minute load average when the last run was final
    limit: int = 0  # each measured worker's --limit (0: none)
    idle_workers: int = 0  # workers polling an empty pool every second meanwhile
    server_errors: int = 0  # ERROR lines the server logged during the trial
    retryable: int = 0  # of which requests answered 503 (the client retries them)
    locked: int = 0  # of which SQLite's "database is locked"
    states: dict[str, int] = field(default_factory=dict)  # final state type: count
    seconds: dict[str, list[float]] = field(default_factory=dict)  # metric: one per run


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(0.9 * len(ordered)) - 1]


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


@contextlib.contextmanager
def api_of(server: PrefectServer) -> Iterator[None]:
    """Prefect's client in this process talks to `server` inside the block."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: server.api}):
        yield


def deploy(server: PrefectServer, workdir: Path) -> None:
    """A process pool, and the noop flow's deployment: the worker imports module noop_flow
    from `workdir` (no code storage, as specsweep's own deployments)."""
    import importlib

    from prefect import deploy as prefect_deploy
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments.runner import EntrypointType

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "noop_flow.py").write_text(FLOW_FILE)
    sys.path.insert(0, str(workdir))
    try:
        noop = importlib.import_module("noop_flow").noop
    finally:
        sys.path.remove(str(workdir))
    with api_of(server):
        with get_client(sync_client=True) as client:
            for pool in (POOL, IDLE_POOL):
                client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        deployment = noop.to_deployment(
            "noop",
            entrypoint_type=EntrypointType.MODULE_PATH,
            job_variables={"working_dir": str(workdir), "env": {"PYTHONPATH": str(workdir)}},
        )
        with contextlib.redirect_stdout(io.StringIO()):  # its table of deployments
            prefect_deploy(
                deployment,
                work_pool_name=POOL,
                build=False,
                push=False,
                print_next_steps_message=False,
                ignore_warnings=True,
            )


def wait_for_workers(
    server: PrefectServer, pool: str, names: set[str], timeout: float = 180
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        online = {
            w["name"]
            for w in server.post(f"/work_pools/{pool}/workers/filter", {})
            if w.get("status") == "ONLINE"
        }
        if names <= online:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers {sorted(names - online)} not online after {timeout}s")
        time.sleep(0.2)


def wait_final(server: PrefectServer, ids: list[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        runs = server.post("/flow_runs/filter", {"flow_runs": {"id": {"any_": ids}}})
        states = {r["id"]: r["state_type"] for r in runs}
        if len(states) == len(ids) and set(states.values()) <= FINAL:
            return states
        if time.monotonic() > deadline:
            raise RuntimeError(f"runs not final after {timeout}s: {states}")
        time.sleep(0.25)


def timeline(server: PrefectServer, flow_run_id: str) -> dict[str, float]:
    """When the run was created and first entered each state type (epoch seconds)."""
    points = {"created": ts(server.get(f"/flow_runs/{flow_run_id}")["created"])}
    for state in server.get(f"/flow_run_states/?flow_run_id={flow_run_id}"):
        points.setdefault(state["type"], ts(state["timestamp"]))
    return points


def trial(
    server: PrefectServer,
    backend: str,
    mode: str,
    query_seconds: int,
    workers: int,
    args: argparse.Namespace,
) -> Trial:
    from prefect.deployments import run_deployment

    env = {**server.env, "PREFECT_WORKER_QUERY_SECONDS": str(query_seconds)}
    tag = f"{backend}-{mode}-q{query_seconds}-w{workers}"
    names = {f"{tag}-{i}" for i in range(workers)}
    idle = {f"{tag}-idle-{i}" for i in range(args.idle_workers)}
    runs = args.runs if mode == "burst" else args.serial_runs
    procs = []
    ids: list[str] = []
    calls: list[float] = []
    states: dict[str, str] = {}
    log_start = server.log.stat().st_size
    try:
        for pool, name in sorted([(POOL, n) for n in names] + [(IDLE_POOL, n) for n in idle]):
            argv = [str(BIN / "prefect"), "worker", "start", "--pool", pool, "--name", name]
            if args.limit and pool == POOL:
                argv += ["--limit", str(args.limit)]
            worker_env = env if pool == POOL else {**env, "PREFECT_WORKER_QUERY_SECONDS": "1"}
            procs.append(start_process(argv, worker_env, server.root, server.root / f"{name}.log"))
        wait_for_workers(server, POOL, names)
        wait_for_workers(server, IDLE_POOL, idle)
        with api_of(server):
            start = time.perf_counter()
            for _ in range(runs):
                began = time.perf_counter()
                ids.append(str(run_deployment(DEPLOYMENT, timeout=0).id))
                calls.append(time.perf_counter() - began)
                if mode == "serial":
                    states.update(wait_final(server, ids[-1:], timeout=args.timeout))
            states.update(wait_final(server, ids, timeout=args.timeout))
            drain_s = time.perf_counter() - start
            load = os.getloadavg()[0]
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(stop_process, procs))
    result = Trial(backend, mode, query_seconds, workers, runs, sum(calls), drain_s, load)
    result.limit, result.idle_workers = args.limit, args.idle_workers
    result.seconds["run_deployment()"] = calls
    with server.log.open("rb") as log:
        log.seek(log_start)
        text = log.read().decode(errors="replace")
    # One event per ERROR line, up to the next timestamped line (its traceback).
    for event in re.split(r"\n(?=\d\d:\d\d:\d\d\.\d+ \| )", text):
        if "| ERROR" in event.split("\n", 1)[0]:
            result.server_errors += 1
            result.retryable += "Encountered retryable exception in request" in event
            result.locked += "database is locked" in event
    for state in states.values():
        result.states[state] = result.states.get(state, 0) + 1
    for flow_run_id in ids:
        points = timeline(server, flow_run_id)
        for metric, (a, b) in METRICS.items():
            if a in points and b in points:
                result.seconds.setdefault(metric, []).append(points[b] - points[a])
    return result


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} {p90(values):6.2f} {max(values):6.2f}"


def ratio(trials: dict[str, Trial], value: Callable[[Trial], float]) -> str:
    """PostgreSQL's `value` over SQLite's, where both ran."""
    if set(trials) != {"sqlite", "postgres"}:
        return ""
    try:
        return f"{value(trials['postgres']) / value(trials['sqlite']):8.2f}"
    except (KeyError, ValueError, ZeroDivisionError):
        return ""


def report(trials: list[Trial], starts: dict[str, float]) -> str:
    started = ", ".join(f"{backend} {s:.1f} s" for backend, s in starts.items())
    lines = [f"server start on a fresh database (migrations included): {started}", ""]
    configs = sorted({(t.mode != "serial", t.query_seconds, t.workers) for t in trials})
    for burst, query_seconds, workers in configs:
        mode = "burst" if burst else "serial"
        here = {
            t.backend: t
            for t in trials
            if (t.mode, t.query_seconds, t.workers) == (mode, query_seconds, workers)
        }
        first = next(iter(here.values()))
        limit = f" with --limit {first.limit}" if first.limit else ""
        idle = (
            f", {first.idle_workers} idle workers polling every 1 s" if first.idle_workers else ""
        )
        lines.append(
            f"{mode}: {first.runs} runs {'submitted at once' if burst else 'one at a time'}, "
            f"{workers} worker(s){limit}, PREFECT_WORKER_QUERY_SECONDS={query_seconds}{idle}"
        )
        head = "".join(f"{backend + ' med/p90/max':>22}" for backend in here)
        lines.append(f"{'seconds':<22}{head}{'  pg/sqlite' if len(here) == 2 else ''}")
        for metric in ("run_deployment()", *METRICS):
            cells = "".join(
                f"{summary(t.seconds.get(metric, [math.nan])):>22}" for t in here.values()
            )
            median_ratio = ratio(here, lambda t, m=metric: statistics.median(t.seconds[m]))
            lines.append(f"{metric:<22}{cells}{median_ratio}")
        if burst:
            for label, attr in (
                ("create all runs", "create_s"),
                ("first create→all final", "drain_s"),
            ):
                cells = "".join(f"{getattr(t, attr):>22.2f}" for t in here.values())
                lines.append(f"{label:<22}{cells}{ratio(here, lambda t, a=attr: getattr(t, a))}")
        loads = "  ".join(f"{b}: {t.load:.1f}" for b, t in here.items())
        lines.append(f"load average (1 min) at the end: {loads} on {os.cpu_count()} CPUs")
        errors = "  ".join(
            f"{b}: {t.server_errors} ({t.retryable} answered 503, {t.locked} database is locked)"
            for b, t in here.items()
        )
        lines.append(f"ERROR events in the server's log: {errors}")
        if any(set(t.states) != {"COMPLETED"} for t in here.values()):
            lines.append("final states: " + "  ".join(f"{b}: {t.states}" for b, t in here.items()))
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modes", nargs="+", default=["serial", "burst"], choices=["serial", "burst"]
    )
    parser.add_argument("--runs", type=int, default=20, help="flow runs per burst")
    parser.add_argument("--serial-runs", type=int, default=8, help="flow runs per serial trial")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--query-seconds", type=int, nargs="+", default=[1, 10])
    parser.add_argument(
        "--limit", type=int, default=0, help="each worker's --limit (runs at once); 0: none"
    )
    parser.add_argument(
        "--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"]
    )
    parser.add_argument(
        "--idle-workers",
        type=int,
        default=0,
        help="also this many workers polling an empty pool every second (the load of "
        "10x as many hosts at the default 10 s)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="per trial, seconds")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs)")
    args = parser.parse_args()
    if "postgres" in args.backends and find_bin_dir() is None:
        print(MISSING, file=sys.stderr)
        return 2

    # Ctrl-C or a plain kill still stops every server, worker and cluster it started (a
    # shell's background job starts with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    scratch = Path(tempfile.mkdtemp(prefix="specsweep-latency-"))
    # This process is a Prefect client too: nothing inherited may point it elsewhere.
    for name in [k for k in os.environ if k.startswith("PREFECT_")]:
        del os.environ[name]
    os.environ.update(
        PREFECT_HOME=str(scratch / "client-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="WARNING",
    )
    trials: list[Trial] = []
    starts: dict[str, float] = {}
    try:
        with contextlib.ExitStack() as stack:
            servers: dict[str, PrefectServer] = {}
            for backend in args.backends:
                url = None
                if backend == "postgres":
                    url = stack.enter_context(postgres_cluster(scratch / "postgres")).url
                began = time.perf_counter()
                servers[backend] = stack.enter_context(
                    prefect_server(scratch / backend, url, extra_env=LOG_EVERY_ERROR)
                )
                starts[backend] = time.perf_counter() - began
                deploy(servers[backend], scratch / backend / "flows")
                print(f"{backend}: server up in {starts[backend]:.1f} s at {servers[backend].api}")
            for mode in args.modes:
                for query_seconds in args.query_seconds:
                    for workers in args.workers:
                        for backend, server in servers.items():
                            print(f"{backend}: {mode}, {workers} worker(s), poll {query_seconds} s")
                            trials.append(
                                trial(server, backend, mode, query_seconds, workers, args)
                            )
                            print(report(trials[-1:], {}).split("\n", 2)[2], flush=True)
    finally:  # what was measured, also when interrupted
        print()
        print(report(trials, starts))
        if args.json:
            results = {
                "argv": sys.argv[1:],
                "starts": starts,
                "trials": [asdict(t) for t in trials],
            }
            args.json.write_text(json.dumps(results, indent=1))
        if args.keep:
            print(f"logs: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
