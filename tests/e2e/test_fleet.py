"""A fleet sweep end to end: Prefect server on PostgreSQL, three hosts: one broken, one
lost mid-sweep, one that does the rest.

Each "GPU host" is a `specsweep fleet worker` process (a real Prefect process worker,
limit 1) with its own simulator port and launch records; the sweep runs from
`specsweep fleet run` as a user starts it. gpu-c is an SSH host whose sshd is gone
(its worker started with --skip-check, as if it broke afterwards): the first variant
it takes fails its pre-flight and goes elsewhere, and its worker stops taking work.
Killing gpu-b's worker and everything under it (flow run, server) stands for a host
dying; Prefect's zombie automation marks its run Crashed when the heartbeats stop,
and the sweep re-runs that variant on another host.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import signal
import socket
import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
import yaml

from specsweep.analysis.answer import analyze_run
from specsweep.results.store import ResultsStore
from specsweep.targets.launch_record import LaunchState
from tests.conftest import free_port, sim_config_data
from tests.prefect_server import BIN, PrefectServer, start_process, stop_process

pytestmark = pytest.mark.e2e

HOSTS = ("gpu-a", "gpu-b")  # alive (until gpu-b is killed)
VICTIM = "gpu-b"
BROKEN = "gpu-c"


def _write_project(root: Path) -> tuple[dict, dict]:
    """The sweep and fleet files; the fleet's work pool is this test's own (the server is
    shared by the session: another test's workers must not count here)."""
    sweep = sim_config_data(root, free_port(), step_sweep={"num_steps": [1, 2, 3]})
    sweep["load"]["concurrency"] = [1, 2]
    unreachable = {"kind": "ssh", "host": "127.0.0.1", "port": free_port(),
                   "connect_attempts": 1, "connect_timeout_s": 3}  # fmt: skip
    fleet = {
        "name": "e2e-lab",
        "pool": f"fleet-e2e-{uuid.uuid4().hex[:8]}",
        "heartbeat_s": 30,  # Prefect's minimum
        "lost_after_s": 40,
        "max_attempts": 4,  # a variant may meet the broken host, then the lost one
        "hosts": [
            *(
                {
                    "name": name,
                    "port": free_port(),  # "hosts" share this machine: their own ports
                    "target": {"kind": "local", "workdir": str(root / name)},
                }
                for name in HOSTS
            ),
            {"name": BROKEN, "target": unreachable},
        ],
    }
    (root / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    (root / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    return sweep, fleet


def _wait(predicate, timeout: float, what: str, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        if time.monotonic() > deadline:
            tail = log.read_text()[-4000:] if log and log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.2)
    return found


def _start_worker(
    pg: PrefectServer,
    root: Path,
    host: str,
    *,
    skip_check: bool = False,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`specsweep fleet worker` for one host, as its operator starts it; `env`: what this
    host's environment adds (its servers inherit it)."""
    argv = [str(BIN / "specsweep"), "fleet", "worker", "-f", "fleet.yaml", "-c", "sweep.yaml",
            "--host", host, *(["--skip-check"] if skip_check else [])]  # fmt: skip
    return start_process(argv, pg.env | (env or {}), root, root / f"worker-{host}.log")


def _wait_for_workers(pg: PrefectServer, pool: str, count: int, log: Path) -> None:
    _wait(
        lambda: len(pg.post(f"/work_pools/{pool}/workers/filter", {})) == count,
        240, "the hosts' workers", log,
    )  # fmt: skip


def _start_sweep(pg: PrefectServer, root: Path, run_id: str, log: Path) -> subprocess.Popen[bytes]:
    """`specsweep fleet run`, as a user starts the sweep."""
    argv = [str(BIN / "specsweep"), "fleet", "run", "-f", "fleet.yaml", "-c", "sweep.yaml",
            "--run-id", run_id]  # fmt: skip
    return start_process(argv, pg.env, root, log)


def _kill_host(worker: subprocess.Popen[bytes]) -> list[int]:
    """The host dies: its worker and everything it started, all at once (SIGKILL).

    The tree is frozen first (SIGSTOP), again until no new process shows up: a flow run
    that launched its server between one listing of the tree and the kill left that
    server running on a loaded machine (its port still open at the end), which no host
    that dies does."""
    root = psutil.Process(worker.pid)
    frozen: dict[int, psutil.Process] = {}
    while new := [p for p in (root, *root.children(recursive=True)) if p.pid not in frozen]:
        for proc in new:
            frozen[proc.pid] = proc
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGSTOP)
    for proc in frozen.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    return list(frozen)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(720)  # one sweep of 3 variants through 3 hosts, waiting out a lost host
def test_a_fleet_sweep_spreads_variants_and_reruns_a_lost_hosts_variant(
    pg_prefect: PrefectServer, tmp_path: Path
):
    sweep, fleet = _write_project(tmp_path)
    # One baseline anywhere: this test is about placement and lost hosts (pinned baselines
    # are the next test's, and the cancellation test's)
    fleet["baseline"] = "once"
    # As many variants as hosts: submitted all at once to workers of limit 1, each host
    # takes one (the broken one fails its pre-flight, the victim dies holding its own);
    # a fourth only queued behind gpu-a while the lost host is waited out.
    sweep["step_sweep"]["num_steps"] = [1, 2]
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    run_id = f"fleet-e2e-{uuid.uuid4().hex[:6]}"  # this test's runs, whatever ran before
    deployed = pg_prefect.cli(
        "specsweep", "fleet", "deploy", "-f", "fleet.yaml", "-c", "sweep.yaml", cwd=tmp_path
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    automations = pg_prefect.post("/automations/filter", {})
    assert any("heartbeats stopped" in a["name"] for a in automations)

    workers = {
        host: _start_worker(pg_prefect, tmp_path, host, skip_check=host == BROKEN)
        for host in (*HOSTS, BROKEN)
    }
    sweep_log = tmp_path / "sweep.log"
    runner = None
    try:
        _wait_for_workers(pg_prefect, fleet["pool"], 3, tmp_path / f"worker-{VICTIM}.log")
        runner = _start_sweep(pg_prefect, tmp_path, run_id, sweep_log)
        store = ResultsStore(sweep["results_dir"])
        # The victim holds its target (a server is starting or measuring) when it dies.
        victim_variant = _wait(
            lambda: next((v for v, t, _ in store.read_phase_files(run_id) if t == VICTIM), None),
            240, f"a variant on {VICTIM}", sweep_log,
        )  # fmt: skip
        killed_at = time.time()
        _kill_host(workers.pop(VICTIM))
        assert runner.wait(timeout=300) == 0, sweep_log.read_text()[-6000:]
    finally:
        for proc in [*workers.values(), *([runner] if runner else [])]:
            stop_process(proc)

    log = sweep_log.read_text()
    assert "hosts online: gpu-a, gpu-b, gpu-c" in log
    assert f"{victim_variant} lost with host {VICTIM}" in log
    assert f"lost with host {BROKEN} (Failed: " in log and "HostUnavailable" in log

    # This sweep's flow run (by its run_id parameter) and the variant runs under it.
    sweeps = pg_prefect.post("/flow_runs/filter", {"flows": {"name": {"any_": ["fleet-sweep"]}}})
    (parent,) = [r for r in sweeps if r["parameters"].get("run_id") == run_id]
    variant_runs = pg_prefect.post(
        "/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [parent["id"]]}}}
    )

    # Every variant completed exactly once, the victim's on the surviving host.
    by_label: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for run in variant_runs:
        label, _, host = run["name"].removeprefix("fleet-variant/").partition("@")
        by_label[label].append((host, run["state_type"]))
    labels = {"baseline", "eagle3-s1-k1-d2", "eagle3-s2-k1-d3"}
    assert set(by_label) == labels
    for label, runs in by_label.items():
        assert [s for _, s in runs].count("COMPLETED") == 1, (label, runs)
    assert (VICTIM, "CRASHED") in by_label[victim_variant]
    assert ("gpu-a", "COMPLETED") in by_label[victim_variant]
    # The broken host failed the one variant it took, then took no more work.
    on_broken = [(lb, st) for lb, runs in by_label.items() for h, st in runs if h == BROKEN]
    assert len(on_broken) == 1 and on_broken[0][1] == "FAILED", on_broken
    assert "gpu-c takes no work" in (tmp_path / f"worker-{BROKEN}.log").read_text()

    # The zombie automation watches fleet hosts' runs only: the sweep itself (default
    # 180 s heartbeats, running longer than lost_after_s) was never marked Crashed.
    states = pg_prefect.get(f"/flow_run_states/?flow_run_id={parent['id']}")
    assert "CRASHED" not in {s["type"] for s in states} and parent["state_type"] == "COMPLETED"

    # No two servers ever held one host at the same time (recorded start/stop times);
    # the victim's server never recorded a stop: it ends when the host died.
    spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for variant, target, phases in store.read_phase_files(run_id):
        end = phases.get("held_until_unix", killed_at if target == VICTIM else None)
        assert end is not None, (variant, target, phases)
        spans[target].append((phases["held_from_unix"], end, variant))
    assert set(spans) == set(HOSTS)  # the broken host never held a server
    for target, host_spans in spans.items():
        host_spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(host_spans):
            assert start >= end, f"{a} and {b} overlapped on {target}"

    # One store: every level of every variant measured OK on one host; a level the
    # victim measured before it died is kept beside the re-run's, not overwritten.
    levels = store.read_levels(run_id)
    assert not levels.duplicated(["variant", "concurrency", "target"]).any()
    ok = levels[levels["status"] == "ok"]
    for label in labels:
        hosts = ok[ok["variant"] == label].groupby("target")["concurrency"].apply(set)
        assert any(c == {1, 2} for c in hosts), (label, hosts)
    assert set(levels["target"]) <= set(HOSTS)
    run_row = store.read_run(run_id)
    assert run_row["status"] == "completed" and run_row["target"] == "e2e-lab"
    assert not json.loads(run_row["variant_errors"] or "{}")

    # Nothing left running on either host: the survivor tore every server down; the
    # victim's record may still name a server (teardown never ran) that died with it,
    # which the host's next kill-stale would clear.
    for host in fleet["hosts"][: len(HOSTS)]:
        assert not _port_open(host["port"]), host
        entries = LaunchState(Path(host["target"]["workdir"]) / "launched.json").entries()
        if host["name"] == VICTIM:
            assert not any(psutil.pid_exists(e["pid"]) for e in entries), entries
        else:
            assert entries == []
    # The server kept every one of these runs in PostgreSQL, read from the cluster itself.
    assert pg_prefect.pg is not None
    ids = ", ".join(f"'{r['id']}'" for r in [parent, *variant_runs])
    stored = pg_prefect.pg.sql(f"SELECT count(*) FROM flow_run WHERE id IN ({ids})")
    assert int(stored) == 1 + len(variant_runs)


def test_cancelling_a_fleet_sweep_cancels_its_variants_and_stops_their_servers(
    pg_prefect: PrefectServer, tmp_path: Path
):
    """The sweep runs as a deployment (an orchestrator worker), as from the UI."""
    sweep, fleet = _write_project(tmp_path)
    deployed = pg_prefect.cli(
        "specsweep", "fleet", "deploy", "-f", "fleet.yaml", "-c", "sweep.yaml",
        "--sweep-pool", "e2e-orchestrator", cwd=tmp_path,
    )  # fmt: skip
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    host = fleet["hosts"][0]
    procs = [
        start_process(
            [str(BIN / "specsweep"), "fleet", "worker", "-f", "fleet.yaml", "--host", host["name"]],
            pg_prefect.env, tmp_path, tmp_path / "worker-host.log",
        ),
        pg_prefect.start_worker("e2e-orchestrator", "orchestrator", cwd=tmp_path),
    ]  # fmt: skip
    try:
        started = pg_prefect.cli(
            "prefect", "deployment", "run", "fleet-sweep/fleet-sweep", "--param", "run_id=cancel-me"
        )
        assert started.returncode == 0, started.stdout + started.stderr
        parent_id = next(
            ln.split("UUID:")[1].strip() for ln in started.stdout.splitlines() if "UUID:" in ln
        )
        store = ResultsStore(sweep["results_dir"])
        _wait(lambda: store.read_phase_files("cancel-me"), 240, "a variant holding the host",
              tmp_path / "worker-host.log")  # fmt: skip
        cancel = pg_prefect.cli("prefect", "flow-run", "cancel", parent_id)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        parent = pg_prefect.wait_state(parent_id, {"CANCELLED", "COMPLETED", "FAILED"}, 120)
        assert parent["state_type"] == "CANCELLED", parent["state"]
        children = _wait(
            lambda: (runs := pg_prefect.post(
                "/flow_runs/filter",
                {"flow_runs": {"parent_flow_run_id": {"any_": [parent_id]}}},
            )) and all(r["state_type"] in {"COMPLETED", "CANCELLED"} for r in runs) and runs,
            120, "every variant run final",
        )  # fmt: skip
        assert any(r["state_type"] == "CANCELLED" for r in children), children
    finally:
        for proc in procs:
            stop_process(proc)
    assert not _port_open(host["port"])
    assert LaunchState(Path(host["target"]["workdir"]) / "launched.json").entries() == []


def _pivots_agree(a, b) -> bool:
    """One variant's pivot in two answers agrees up to noise: the same kind, or a crossing
    and an inconclusive bracket; either way their 95% ranges (a bracket's open end
    unbounded) overlap."""
    kinds = {a.kind, b.kind}
    if a.kind != b.kind and not kinds <= {"crosses", "inconclusive"}:
        return False
    if not kinds <= {"crosses", "inconclusive"}:
        return True

    def span(p) -> tuple[float, float]:
        return (p.low if p.low is not None else 0.0, p.high if p.high is not None else math.inf)

    (lo_a, hi_a), (lo_b, hi_b) = span(a), span(b)
    return lo_a <= hi_b and lo_b <= hi_a


@pytest.mark.timeout(600)
def test_a_fleet_with_a_slower_host_answers_as_one_host_does(
    pg_prefect: PrefectServer, tmp_path: Path
):
    """search: adaptive on two hosts of one GPU kind, gpu-b 20% slower (its simulator's
    GPU speed 0.8), fleet.baseline per_gpu_kind (the default): gpu-a measures the kind's
    baseline, gpu-b its calibration level (c=1), which fails, so it measures its own;
    every speedup is within a host, and the answer is the one a single host gives. The
    search hands out only the speculative variants, as hosts free up."""
    sweep, fleet = _write_project(tmp_path)
    sweep["search"] = "adaptive"
    sweep["step_sweep"]["num_steps"] = [1, 3]  # a clear answer: s3 at c=1, baseline at 16
    sweep["load"] |= {
        "concurrency": [1, 16], "output_len": 64, "min_requests": 16, "requests_per_stream": 4,
    }  # fmt: skip
    # simulated time at a tenth of real time (not a twentieth): the load generator then
    # needs half the CPU per measured second, on a machine all these processes share
    sweep["server"]["env"]["SPECSWEEP_SIM_TIME_SCALE"] = "0.1"
    fleet["hosts"] = fleet["hosts"][: len(HOSTS)]  # both alive; no broken host
    # c=1: the least CPU per token of the load generator (the "hosts" share 2 CPUs here)
    fleet["calibration"] = {"concurrency": 1}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    # The same sweep on one host at full speed, through `specsweep run`.
    one = tmp_path / "one"
    one.mkdir()
    single = sweep | {
        "target": {"kind": "local", "name": "one-host", "workdir": str(one / "work")},
        "results_dir": str(one / "results"),
        "server": sweep["server"] | {"port": free_port()},
    }
    (one / "sweep.yaml").write_text(yaml.safe_dump(single))
    run_id = f"fleet-search-{uuid.uuid4().hex[:6]}"
    # Before the fleet starts, not beside it: the reference is what one host measures on
    # this machine, not while two Prefect workers, their flow runs and servers start on
    # the same two CPUs (beside them, at three pytest workers, its c=1 ratios spread over
    # 0.83-1.40 and it named no clear level in 2 of 10 runs).
    alone = start_process(
        [str(BIN / "specsweep"), "run", "step-sweep", "-c", "sweep.yaml", "--run-id", "one"],
        pg_prefect.env, one, one / "run.log",
    )  # fmt: skip
    try:
        assert alone.wait(timeout=240) == 0, (one / "run.log").read_text()[-4000:]
    finally:
        stop_process(alone)
    slow = {VICTIM: {"SPECSWEEP_SIM_GPU_SPEED": "0.8"}}  # the worker's env: its server's
    # the workers create the pool and their own queues; deploy creates them too
    procs = [_start_worker(pg_prefect, tmp_path, h, env=slow.get(h)) for h in HOSTS]
    sweep_log = tmp_path / "sweep.log"
    try:
        deployed = pg_prefect.cli(
            "specsweep", "fleet", "deploy", "-f", "fleet.yaml", "-c", "sweep.yaml", cwd=tmp_path
        )
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert "host queues in" in deployed.stdout and "host-gpu-b" in deployed.stdout
        _wait_for_workers(pg_prefect, fleet["pool"], 2, tmp_path / f"worker-{HOSTS[0]}.log")
        runner = _start_sweep(pg_prefect, tmp_path, run_id, sweep_log)
        procs.append(runner)
        assert runner.wait(timeout=400) == 0, sweep_log.read_text()[-6000:]
    finally:
        for proc in procs:
            stop_process(proc)
    store = ResultsStore(sweep["results_dir"])
    log = sweep_log.read_text()

    # The plan: gpu-a is the kind's reference; gpu-b failed its calibration at c=1 by about
    # its slowdown, and measured its own baseline.
    plans = store.read_host_plans(run_id).set_index("target")
    assert plans.loc["gpu-a", "role"] == "reference"
    b = plans.loc["gpu-b"]
    assert (b["role"], b["baseline_target"], b["passed"]) == ("own_baseline", "gpu-b", False), b
    # The ratio is what the two stored baseline levels at c=1 measured, and the injected
    # fault bounds it from what was measured, not from a guess at this box's load: gpu-b is
    # slower than the tolerance allows, and no slower than its GPU (0.8 when all of a
    # token's time is GPU time; nearer 1 the more of it the shared CPUs take), so the
    # measured 95% interval reaches 0.8 or above and lies below 1 - tolerance at its low end.
    assert b["calibration_concurrency"] == 1, b
    at_c1 = store.read_levels(run_id).query("is_baseline and concurrency == 1")
    thr = at_c1.groupby("target")["output_throughput"].first()
    assert b["calibration_ratio"] == pytest.approx(thr["gpu-b"] / thr["gpu-a"], rel=1e-9), b
    assert b["calibration_lo"] < 1 - b["tolerance"] and b["calibration_hi"] >= 0.8, b
    assert set(plans["gpu_kind"]) == {"1x simulated"} and set(plans["mode"]) == {"per_gpu_kind"}
    assert "baselines: gpu-b: calibration at c=1: -" in log, log[-4000:]
    assert "measures its own baseline" in log
    # Baselines were pinned: gpu-a's full, gpu-b's calibration then its own full; the
    # search handed out only the speculative variants.
    sweeps = pg_prefect.post("/flow_runs/filter", {"flows": {"name": {"any_": ["fleet-sweep"]}}})
    (parent,) = [r for r in sweeps if r["parameters"].get("run_id") == run_id]
    children = pg_prefect.post(
        "/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [parent["id"]]}}}
    )
    baselines = sorted(
        (r["name"], next(t for t in r["tags"] if t.startswith("baseline:")), r["state_type"])
        for r in children
        if r["name"].startswith("fleet-variant/baseline@")
    )
    assert baselines == [
        ("fleet-variant/baseline@gpu-a", "baseline:reference", "COMPLETED"),
        ("fleet-variant/baseline@gpu-b", "baseline:calibration", "COMPLETED"),
        ("fleet-variant/baseline@gpu-b", "baseline:own_baseline", "COMPLETED"),
    ], baselines
    levels = store.read_levels(run_id)
    assert not levels.duplicated(["variant", "concurrency", "target"]).any()
    base = levels[levels["is_baseline"]]
    # gpu-b's full baseline measured only the level its calibration had not
    cells = [("gpu-a", 1), ("gpu-a", 16), ("gpu-b", 1), ("gpu-b", 16)]
    assert sorted(zip(base["target"], base["concurrency"], strict=True)) == cells

    # The search: every variant launched once (both chains are its seeds), on the hosts.
    phases = store.read_phase_files(run_id)
    assert {v for v, _, _ in phases} == {"baseline", "eagle3-s1-k1-d2", "eagle3-s3-k1-d4"}
    assert {t for _, t, _ in phases} == set(HOSTS)
    run_row = store.read_run(run_id)
    assert run_row["status"] == "completed" and run_row["search_stop"]
    final = store.read_predictions(run_id)
    final = final[final["stage"] == "final"]
    assert set(final["variant"]) == {"baseline", "eagle3-s1-k1-d2", "eagle3-s3-k1-d4"}
    assert final["launched"].all()

    # Every speedup is within a host: each variant is divided by its own host's baseline.
    answer = analyze_run(store, run_id).first  # one GPU kind, one shape
    assert answer.gpu_kind == "1x simulated"
    assert (answer.levels["baseline_target"] == answer.levels["target"]).all()
    # ... and the answer is one host's: the best per level where one host's is clear, and
    # each variant's pivot (the same kind of crossing, overlapping 95% ranges).
    reference = analyze_run(ResultsStore(single["results_dir"]), "one").first
    clear = reference.best[~reference.best["near_tie"].astype(bool)]
    assert len(clear) >= 1, reference.best  # this sweep was chosen for its clear answer
    fleet_best = answer.best.set_index("concurrency")["best_variant"]
    for c, best in zip(clear["concurrency"], clear["best_variant"], strict=True):
        assert fleet_best[c] == best, (c, answer.best, reference.best)
    assert set(answer.pivots) == set(reference.pivots)
    for variant, pivot in reference.pivots.items():
        assert _pivots_agree(answer.pivots[variant], pivot), (answer.pivots, reference.pivots)
