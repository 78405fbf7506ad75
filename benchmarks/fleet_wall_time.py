"""How much sooner does a fleet sweep finish on two hosts than on one, and where does
the rest of the time go?

The same sweep (baseline + EAGLE-3 num_steps 1..5 on the simulator, by default) runs as a
fleet sweep on a 1-host fleet and on a 2-host fleet (--hosts 1 2 3 adds a third), one
after the other, against the same Prefect server: PostgreSQL-backed (a cluster from
Debian's packages on 127.0.0.1, tests/postgres.py) unless --sqlite. Each "host" is a
local target with its own workdir and server port, as in tests/e2e/test_fleet.py. For
each fleet size the script does what a user does:

    specsweep fleet deploy -f fleet-Nh-r1.yaml -c sweep.yaml   (pool wall-Nh-r1, hosts hN-a..)
    specsweep fleet worker -f fleet-Nh-r1.yaml -c sweep.yaml --host hN-a   (one per host)
    specsweep fleet run    -f fleet-Nh-r1.yaml -c sweep.yaml --run-id ...  (timed)

then stops the workers. Every fleet size has its own host names (so its own host limits
and results `target`s), and every trial its own fleet name and work pool (so a stopped
worker, listed ONLINE for a while, never counts as registered). --rounds 2 runs the sizes
twice, alternating (1 2 1 2), which shows how much a busy machine moves the numbers.
Workers poll every --query-seconds (PREFECT_WORKER_QUERY_SECONDS; Prefect's default, 10,
is what `specsweep fleet worker` gets unless it is set).

The load is chosen so that a variant's measuring takes ~15-20 s with the simulator at
real speed (--time-scale 1: the default profile's ~92 tok/s for one stream): levels
1, 4 and 16, 64 output tokens, two requests per stream (at least 4) plus one warmup
request per stream; the server's start (2 s load + 1 s warmup + /health, ~5 s) comes on
top, so a server holds its host ~20-25 s per variant.

Reported per fleet size:

    wall            `specsweep fleet run` from launch to exit (CLI start-up, pre-flight,
                    submission, the variants, the report the sweep publishes)
    speedup         1-host wall / this wall (and its inverse, the N-host/1-host ratio)
    held            sum over variants of the time a server held its host: the target
                    lock's span, kill-stale .. teardown, from the results' phase sidecars
    ideal           held / hosts: the wall if Prefect cost nothing and hosts never idled
    util            per host: its held time / wall
    head, tail      CLI launch -> first variant claimed by a worker (split per trial: CLI
                    start-up and imports until the fleet-sweep run exists, its set-up
                    until the variants are submitted, the first worker poll); last
                    variant's run ended -> CLI exit (the sweep's 1 s poll, summary,
                    report, exit)

and per variant (median and max over the sweep's variants), from the flow runs' state
history (API) and the sidecars:

    idle            the host's previous run ended (or this run was created) -> its worker
                    claimed this run (Pending): the flow-run process exiting, the worker's
                    poll interval
    supervisor      Pending -> "Downloading flow code" in the run's logs: Prefect 3.9's
                    process worker starts `python -m prefect.runner._workspace_supervisor`,
                    which imports Prefect, reads the run and its deployment and prepares
                    the working directory (nothing to copy here: it is the deployment's)
    engine          -> Running: the supervisor execs `python -m prefect.engine`, a second
                    interpreter that imports Prefect again, then flows.fleet_variant
                    (specsweep, its flows and tasks), validates the parameters, proposes
                    Running
    pre-flight      Running -> the nested benchmark-variant run starts: the host's
                    pre-flight check (results dir write, nvidia-smi) and creating the run
    lock            nested run starts -> held_from: reading the results store for levels
                    already measured, taking the host's global concurrency slot
    after           held_until -> the fleet-variant run's end: nested run and parent
                    finishing (results, state changes)
    run-held        the fleet-variant run's Running time minus its held time: Prefect's
                    overhead inside the run (pre-flight + lock + after)
    per variant     idle + supervisor + engine + run-held: what a host spends per variant
                    not holding its server

Both "hosts" share this machine's CPUs (the script prints how many), so on a small
machine the simulators, load generators, flow-run processes, workers and the Prefect
server of a 2-host run compete for them; the table notes the machine's CPU use and load,
and a note names every variant whose measuring took far longer in one trial than in
another (a starved simulator also measures lower throughput: its numbers are suspect).

    .venv/bin/python benchmarks/fleet_wall_time.py                  # 1 and 2 hosts
    .venv/bin/python benchmarks/fleet_wall_time.py --hosts 1 2 3 --query-seconds 1
    .venv/bin/python benchmarks/fleet_wall_time.py --sqlite --levels 1 8 --output-len 128 \\
        --json fleet.json --keep

Takes 5-10 minutes on a busy 2-CPU machine (the default sweep: 4-7 min on one host, 2.5-5
on two; --rounds 2 doubles it). Every process it starts
(PostgreSQL, the Prefect server, workers, the sweep, the servers the workers' flow runs
launch) is stopped at the end, on Ctrl-C and on failure too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specsweep.config.file import parse_config  # noqa: E402
from specsweep.config.fleet import config_for_host, parse_fleet  # noqa: E402
from specsweep.results.store import ResultsStore  # noqa: E402
from tests.postgres import MISSING, find_bin_dir, postgres_cluster  # noqa: E402
from tests.prefect_server import (  # noqa: E402
    BIN,
    PrefectServer,
    free_port,
    prefect_server,
    start_process,
    stop_process,
)

SWEEP_NAME = "fleet-wall-time"


@dataclass
class VariantRun:
    """One fleet-variant flow run, its timeline in epoch seconds (None: never reached)."""

    label: str
    host: str
    state: str
    created: float
    pending: float | None
    workspace: float | None  # Prefect's workspace supervisor logs "Downloading flow code"
    running: float | None
    nested_start: float | None  # the benchmark-variant run inside it
    held_from: float | None
    held_until: float | None
    end: float | None
    phases: dict[str, float] = field(default_factory=dict)  # the sidecar's *_s
    idle: float | None = None  # set per host, from the host's previous run

    def span(self, a: str, b: str) -> float | None:
        start, stop = getattr(self, a), getattr(self, b)
        return None if start is None or stop is None else stop - start

    @property
    def held(self) -> float | None:
        return self.span("held_from", "held_until")

    @property
    def run_minus_held(self) -> float | None:
        running, held = self.span("running", "end"), self.held
        return None if running is None or held is None else running - held

    @property
    def per_variant(self) -> float | None:
        parts = (self.idle, self.span("pending", "running"), self.run_minus_held)
        return None if None in parts else sum(parts)  # type: ignore[arg-type]


@dataclass
class Trial:
    round: int
    hosts: list[str]
    run_id: str
    fleet: str
    deploy_s: float
    workers_up_s: float  # workers started -> all ONLINE in the pool
    launched: float  # epoch seconds, `fleet run` started
    exited: float
    sweep_run: dict[str, float]  # the fleet-sweep flow run: created, start, end (epoch s)
    cpu_busy_pct: float  # the machine's CPU use while the sweep ran
    load_avg: float  # 1-minute load average at its end
    variants: list[VariantRun]

    @property
    def wall(self) -> float:
        return self.exited - self.launched

    @property
    def sweep_run_s(self) -> float | None:
        run = self.sweep_run
        return run["end"] - run["start"] if "start" in run and "end" in run else None

    def head_parts(self) -> str:
        """Where the head went: CLI start-up, the sweep's set-up, the first claim."""
        created = self.sweep_run.get("created")
        submitted = min((v.created for v in self.variants), default=None)
        claimed = min((v.pending for v in self.variants if v.pending), default=None)
        points = [("sweep run created", created), ("first variant submitted", submitted)]
        points.append(("claimed", claimed))
        parts, last = [], self.launched
        for name, at in points:
            if at is not None:
                parts.append(f"{name} +{at - last:.1f} s")
                last = at
        return "launch -> " + ", ".join(parts)

    def held_by_host(self) -> dict[str, float]:
        out = dict.fromkeys(self.hosts, 0.0)
        for v in self.variants:
            out[v.host] = out.get(v.host, 0.0) + (v.held or 0.0)
        return out


# --- processes ----------------------------------------------------------------------------


class Processes:
    """Everything started for a trial, stopped with all its descendants (the flow-run
    processes and the simulators they launch, which run in sessions of their own)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path):
        proc = start_process(argv, env, cwd, log)
        self.procs.append(proc)
        return proc

    def stop_all(self, grace_s: float = 15) -> None:
        """SIGTERM to every process group at once, SIGKILL after `grace_s`; then whatever
        of their descendants is left (tests.prefect_server.stop_process, in parallel)."""
        tree: list[psutil.Process] = []
        for proc in self.procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                tree += psutil.Process(proc.pid).children(recursive=True)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        while self.procs:
            stop_process(self.procs.pop(), timeout=0)  # SIGKILL to what is left of the group
        for child in tree:  # psutil refuses a pid that was reused meanwhile
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                child.kill()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds every `finally`: cleanup runs


# --- the project: a sweep and one fleet file per fleet size --------------------------------


def sweep_data(args: argparse.Namespace, project: Path) -> dict[str, Any]:
    """The simulator sweep every fleet size runs (its target/port are each host's)."""
    return {
        "name": SWEEP_NAME,
        "target": {"kind": "local", "name": "unused", "workdir": str(project / "work")},
        "results_dir": str(project / "results"),
        "server": {
            "backend": "simulator",
            "model_path": "sim/llama-3.1-8b-instruct",
            "port": free_port(),
            "max_running_requests": 64,
            "startup_timeout_s": 120,  # a loaded machine starts Python slowly
            "env": {"SPECSWEEP_SIM_TIME_SCALE": str(args.time_scale)},
        },
        "step_sweep": {
            "algorithm": "EAGLE3",
            "draft_model_path": "sim/eagle3-llama-3.1-8b",
            "num_steps": args.num_steps,
            "topk": 1,
        },
        "load": {
            "concurrency": args.levels,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "requests_per_stream": args.requests_per_stream,
            "min_requests": args.min_requests,
            "seed": 0,
        },
    }


def fleet_data(size: int, round_: int, project: Path) -> dict[str, Any]:
    """Hosts hN-a, hN-b, ...; fleet and pool wall-Nh-rR, so every trial's workers have
    names of their own (a stopped worker stays listed as ONLINE for a while)."""
    names = [f"h{size}-{letter}" for letter in string.ascii_lowercase[:size]]
    return {
        "name": f"wall-{size}h-r{round_}",
        "pool": f"wall-{size}h-r{round_}",
        # one baseline anywhere, as when these numbers were first taken: per_gpu_kind would
        # add a calibration launch per extra host (docs/fleet.md)
        "baseline": "once",
        "hosts": [
            {
                "name": name,
                "port": free_port(),  # the hosts share this machine: their own ports
                "target": {"kind": "local", "workdir": str(project / "hosts" / name)},
            }
            for name in names
        ],
    }


# --- one fleet size -------------------------------------------------------------------------


def _cli(server: PrefectServer, project: Path, *argv: str) -> float:
    started = time.monotonic()
    done = server.cli(*argv, cwd=project, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return time.monotonic() - started


def _wait_workers(server: PrefectServer, pool: str, names: set[str], logs: Path) -> None:
    deadline = time.monotonic() + 240
    while True:
        online = {
            w["name"]
            for w in server.post(f"/work_pools/{pool}/workers/filter", {})
            if w.get("status") == "ONLINE"
        }
        if names <= online:
            return
        if time.monotonic() > deadline:
            tails = "\n".join(p.read_text()[-1500:] for p in logs.glob("worker-*.log"))
            raise RuntimeError(f"workers {sorted(names - online)} not online in 240 s\n{tails}")
        time.sleep(0.25)


def run_trial(
    server: PrefectServer, project: Path, size: int, round_: int, args: argparse.Namespace
) -> Trial:
    fleet_file = project / f"fleet-{size}h-r{round_}.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet_data(size, round_, project)))
    fleet = parse_fleet(yaml.safe_load(fleet_file.read_text()))
    names = [h.name for h in fleet.hosts]
    files = ["-f", fleet_file.name, "-c", "sweep.yaml"]
    say(f"[{fleet.name}] deploying fleet {fleet.name}: hosts {', '.join(names)}")
    deploy_s = _cli(server, project, "specsweep", "fleet", "deploy", *files)

    logs = project / "logs" / fleet.name
    logs.mkdir(parents=True, exist_ok=True)
    env = {**server.env, "PREFECT_WORKER_QUERY_SECONDS": str(args.query_seconds)}
    run_id = f"{fleet.name}-{datetime.now():%Y%m%d-%H%M%S}"
    procs = Processes()
    try:
        started = time.monotonic()
        for name in names:
            argv = [str(BIN / "specsweep"), "fleet", "worker", *files, "--host", name]
            procs.start(argv, env, project, logs / f"worker-{name}.log")
        _wait_workers(server, fleet.pool, {f"{fleet.name}-{n}" for n in names}, logs)
        workers_up_s = time.monotonic() - started
        say(f"[{fleet.name}] workers online in {workers_up_s:.1f} s; sweep {run_id} ...")

        psutil.cpu_percent(None)  # starts the machine-wide CPU use counter
        log = logs / "fleet-run.log"
        argv = [str(BIN / "specsweep"), "fleet", "run", *files, "--run-id", run_id]
        launched = time.time()
        runner = procs.start(argv, env, project, log)
        try:
            code = runner.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"sweep {run_id} still running after {args.timeout} s") from None
        exited = time.time()
        cpu_busy = psutil.cpu_percent(None)
        if code != 0:
            raise RuntimeError(f"sweep {run_id} exited {code}:\n{log.read_text()[-6000:]}")
        say(f"[{fleet.name}] done in {exited - launched:.1f} s")
    finally:
        procs.stop_all()
        _kill_recorded_servers(project, fleet)

    variants = collect_variants(server, project, run_id)
    sweep_runs = server.post(
        "/flow_runs/filter",
        {"flow_runs": {"name": {"any_": [f"fleet-sweep/{fleet.name}/{size}-hosts"]}}},
    )
    sweep_run: dict[str, float] = {}
    for run in sweep_runs:
        if ts(run["created"]) >= launched:  # this trial's (a fleet name is used once)
            times = {"created": run["created"], "start": run["start_time"], "end": run["end_time"]}
            sweep_run = {k: ts(v) for k, v in times.items() if v}
    return Trial(
        round_,
        names,
        run_id,
        fleet.name,
        deploy_s,
        workers_up_s,
        launched,
        exited,
        sweep_run,
        cpu_busy,
        os.getloadavg()[0],
        variants,
    )


def _kill_recorded_servers(project: Path, fleet: Any) -> None:
    """Belt and braces: any server a host's launch record still names, stopped."""
    from specsweep.pipeline import kill_stale_servers

    config = parse_config(yaml.safe_load((project / "sweep.yaml").read_text()))
    for host in fleet.hosts:
        with contextlib.suppress(Exception):
            kill_stale_servers(config_for_host(config, host))


# --- what happened: flow runs from the API, server spans from the sidecars -----------------


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def collect_variants(server: PrefectServer, project: Path, run_id: str) -> list[VariantRun]:
    runs = server.post(
        "/flow_runs/filter",
        {
            "flows": {"name": {"any_": ["fleet-variant"]}},
            "flow_runs": {"tags": {"all_": [f"run:{run_id}"]}},
            "limit": 200,
        },
    )
    nested = server.post(
        "/flow_runs/filter",
        {"flow_runs": {"parent_flow_run_id": {"any_": [r["id"] for r in runs]}}, "limit": 200},
    )
    parent_task_runs = [n["parent_task_run_id"] for n in nested if n["parent_task_run_id"]]
    task_runs = server.post(
        "/task_runs/filter", {"task_runs": {"id": {"any_": parent_task_runs}}, "limit": 200}
    )
    flow_of_task = {t["id"]: t["flow_run_id"] for t in task_runs}
    nested_start = {
        flow_of_task.get(n["parent_task_run_id"]): ts(n["start_time"])
        for n in nested
        if n["start_time"]
    }
    workspace: dict[str, float] = {}  # flow run -> its supervisor's "Downloading flow code"
    if runs:
        logs = server.post(
            "/logs/filter",
            {
                "logs": {
                    "flow_run_id": {"any_": [r["id"] for r in runs]},
                    "text": {"query": "Downloading flow code"},
                },
                "sort": "TIMESTAMP_ASC",
                "limit": 200,  # the most the API returns at once
            },
        )
        for line in logs:  # the text search matches any of the words: check the phrase
            if "Downloading flow code" in line["message"]:
                workspace.setdefault(line["flow_run_id"], ts(line["timestamp"]))
    sidecars = {
        (variant, target): phases
        for variant, target, phases in ResultsStore(project / "results").read_phase_files(run_id)
    }
    out: list[VariantRun] = []
    for run in runs:
        label, _, host = run["name"].removeprefix("fleet-variant/").partition("@")
        first: dict[str, float] = {}
        for state in server.get(f"/flow_run_states/?flow_run_id={run['id']}"):
            first.setdefault(state["type"], ts(state["timestamp"]))
        phases = sidecars.get((label, host), {})
        out.append(
            VariantRun(
                label,
                host,
                run["state_type"],
                ts(run["created"]),
                first.get("PENDING"),
                workspace.get(run["id"]),
                first.get("RUNNING"),
                nested_start.get(run["id"]),
                phases.get("held_from_unix"),
                phases.get("held_until_unix"),
                ts(run["end_time"]) if run["end_time"] else None,
                {k: v for k, v in phases.items() if k.endswith("_s")},
            )
        )
    by_host: dict[str, list[VariantRun]] = {}
    for v in sorted(out, key=lambda v: v.pending or v.created):
        by_host.setdefault(v.host, []).append(v)
    for host_runs in by_host.values():
        free_since = None
        for v in host_runs:
            if v.pending is not None:
                v.idle = v.pending - max(v.created, free_since or v.created)
            free_since = v.end
    return sorted(out, key=lambda v: v.pending or v.created)


# --- the report ---------------------------------------------------------------------------


PER_VARIANT: list[tuple[str, Callable[[VariantRun], float | None]]] = [
    ("held", lambda v: v.held),
    ("launch→ready", lambda v: v.phases.get("launch_to_ready_s")),
    ("measuring", lambda v: v.phases.get("benchmark_s")),
    ("idle", lambda v: v.idle),
    ("supervisor", lambda v: v.span("pending", "workspace")),
    ("engine", lambda v: v.span("workspace", "running")),
    ("pre-flight", lambda v: v.span("running", "nested_start")),
    ("lock", lambda v: v.span("nested_start", "held_from")),
    ("after", lambda v: v.span("held_until", "end")),
    ("run-held", lambda v: v.run_minus_held),
    ("per variant", lambda v: v.per_variant),
]


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def med_max(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"{statistics.median(got):.1f} / {max(got):.1f}" if got else "-"


def slow_measuring(trials: list[Trial], factor: float = 1.5) -> list[str]:
    """A note per variant whose measuring took `factor` x its fastest trial's or longer."""
    fastest: dict[str, float] = {}
    for t in trials:
        for v in t.variants:
            if (s := v.phases.get("benchmark_s")) is not None:
                fastest[v.label] = min(s, fastest.get(v.label, s))
    notes = [
        f"  {v.label} on {v.host} ({label(t)}): {v.phases['benchmark_s']:.1f} s, "
        f"{v.phases['benchmark_s'] / fastest[v.label]:.1f}x its fastest"
        for t in trials
        for v in t.variants
        if v.phases.get("benchmark_s", 0) >= factor * fastest.get(v.label, float("inf"))
    ]
    if not notes:
        return []
    head = "Measuring took much longer than in another trial (CPU starvation: suspect numbers):"
    return ["", head, *notes]


def label(t: Trial) -> str:
    return f"{len(t.hosts)} host{'s' if len(t.hosts) > 1 else ''} r{t.round}"


def table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in [head]]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def report(trials: list[Trial], args: argparse.Namespace, backend: str, server_start: float) -> str:
    n_variants = len(trials[0].variants) if trials else 0
    lines = [
        f"Fleet sweep wall time: {n_variants} variants (baseline + EAGLE-3 num_steps "
        f"{args.num_steps}), levels {args.levels}, input {args.input_len} / output "
        f"{args.output_len} tokens, simulator time scale {args.time_scale}; Prefect server on "
        f"{backend} (started in {server_start:.0f} s), workers poll every "
        f"{args.query_seconds} s.",
        f"All hosts share this machine: {os.cpu_count()} CPUs "
        f"({len(os.sched_getaffinity(0))} usable by this process); the hosts' simulators, "
        "load generators, flow-run processes and workers, the Prefect server (and anything "
        "else running here) compete for them.",
        "",
    ]
    rows = []
    for t in trials:
        base = next((b for b in trials if b.round == t.round and len(b.hosts) == 1), None)
        held = t.held_by_host()
        firsts = [v.pending for v in t.variants if v.pending is not None]
        ends = [v.end for v in t.variants if v.end is not None]
        rows.append(
            [
                label(t),
                str(len(t.variants)),
                f"{t.wall:.1f}",
                f"{base.wall / t.wall:.2f}x" if base else "-",
                f"{t.wall / base.wall:.2f}" if base else "-",
                f"{sum(held.values()):.1f}",
                f"{sum(held.values()) / len(t.hosts):.1f}",
                " ".join(f"{h} {held[h] / t.wall:.0%}" for h in t.hosts),
                fmt(min(firsts) - t.launched if firsts else None),
                fmt(t.exited - max(ends) if ends else None),
                fmt(t.sweep_run_s),
                f"{t.cpu_busy_pct:.0f}%",
                f"{t.load_avg:.1f}",
            ]
        )
    head = ["fleet", "variants", "wall s", "speedup", "N/1 wall", "held s", "ideal s"]
    head += ["util per host (held/wall)", "head s", "tail s", "sweep run s", "CPU busy", "load"]
    lines.append(table(head, rows))
    sizes = sorted({len(t.hosts) for t in trials})
    if args.rounds > 1 and 1 in sizes:
        walls = {n: statistics.median(t.wall for t in trials if len(t.hosts) == n) for n in sizes}
        lines.append(
            "median wall over rounds: "
            + ", ".join(f"{n} host(s) {w:.1f} s ({walls[1] / w:.2f}x)" for n, w in walls.items())
        )
    lines += ["", "Per variant, seconds, median / max over the sweep's variants:"]
    rows = [
        [label(t)] + [med_max([get(v) for v in t.variants]) for _, get in PER_VARIANT]
        for t in trials
    ]
    lines.append(table(["fleet", *(name for name, _ in PER_VARIANT)], rows))
    for t in trials:
        lines += [
            "",
            f"{label(t)}: run {t.run_id} (deploy {t.deploy_s:.1f} s, workers "
            f"online {t.workers_up_s:.1f} s); head: {t.head_parts()}",
            "claimed, held from, ended: seconds after launch",
        ]
        since = t.launched
        rows = [
            [v.label, v.host, v.state.lower()]
            + [fmt(x and x - since) for x in (v.pending, v.held_from, v.end)]
            + [fmt(get(v)) for _, get in PER_VARIANT]
            for v in t.variants
        ]
        head = ["variant", "host", "state", "claimed", "held from", "ended"]
        lines.append(table(head + [name for name, _ in PER_VARIANT], rows))
    lines += slow_measuring(trials)
    lines += [
        "",
        "wall: `specsweep fleet run` launch to exit; held: kill-stale..teardown under the "
        "host's lock (sidecars); ideal: held / hosts; head: launch -> first run claimed; "
        "tail: last run ended -> exit (the sweep's poll, summary, report).",
        "idle: host free (its last run ended, or this run created) -> claimed (Pending); "
        "supervisor: Pending -> the workspace supervisor's first log line (a Python process, "
        "Prefect imports); engine: -> Running (a second process, Prefect and flow imports, "
        "parameters); pre-flight: "
        "Running -> nested benchmark-variant run started; lock: -> held_from (store scan, "
        "host slot); after: held_until -> run end; run-held: Running time - held; "
        "per variant: idle + supervisor + engine + run-held.",
    ]
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2], help="fleet sizes")
    parser.add_argument(
        "--num-steps",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4, 5],
        help="EAGLE-3 variants besides the baseline",
    )
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16], help="concurrency")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--min-requests", type=int, default=4)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="SPECSWEEP_SIM_TIME_SCALE: 1 = the profile's real speed",
    )
    parser.add_argument(
        "--query-seconds",
        type=int,
        default=10,
        help="workers' PREFECT_WORKER_QUERY_SECONDS (Prefect's default: 10)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the fleet sizes this many times, alternating (1 2 1 2 ...)",
    )
    parser.add_argument("--sqlite", action="store_true", help="Prefect on SQLite, not PostgreSQL")
    parser.add_argument("--timeout", type=float, default=1200, help="per sweep, seconds")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, results)")
    args = parser.parse_args()
    if not args.sqlite and find_bin_dir() is None:
        print(f"{MISSING} (or pass --sqlite)", file=sys.stderr)
        return 2

    # Ctrl-C, kill and a closed terminal all stop every process started here. SIGINT is
    # set explicitly: a shell's background job starts with it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    scratch = Path(tempfile.mkdtemp(prefix="specsweep-fleet-wall-"))
    project = scratch / "project"
    project.mkdir()
    (project / "sweep.yaml").write_text(yaml.safe_dump(sweep_data(args, project)))
    parse_config(yaml.safe_load((project / "sweep.yaml").read_text()))  # fail before starting
    backend = "SQLite" if args.sqlite else "PostgreSQL"
    trials: list[Trial] = []
    try:
        with contextlib.ExitStack() as stack:
            database_url = None
            started = time.monotonic()
            if not args.sqlite:
                say("starting PostgreSQL ...")
                database_url = stack.enter_context(postgres_cluster(scratch / "pg")).url
            say(f"starting the Prefect server on {backend} ...")
            server = stack.enter_context(prefect_server(scratch / "prefect", database_url))
            server_start = time.monotonic() - started
            for round_ in range(1, args.rounds + 1):
                for size in args.hosts:
                    trials.append(run_trial(server, project, size, round_, args))
        text = report(trials, args, backend, server_start)
        print(text)
        if args.json:
            data = {
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "cpus": os.cpu_count(),
                "backend": backend,
                "trials": [
                    asdict(t) | {"wall_s": t.wall, "sweep_run_s": t.sweep_run_s} for t in trials
                ],
            }
            args.json.write_text(json.dumps(data, indent=2))
    except KeyboardInterrupt:
        say("interrupted: stopped every process this script started")
        return 130
    finally:
        if args.keep:
            say(f"kept {scratch}")
        else:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
