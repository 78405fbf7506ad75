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
    pg: PrefectServer, root: Path, host: str, *, skip_check: bool = False
) -> subprocess.Popen[bytes]:
    """`specsweep fleet worker` for one host, as its operator starts it."""
    argv = [str(BIN / "specsweep"), "fleet", "worker", "-f", "fleet.yaml", "-c", "sweep.yaml",
            "--host", host, *(["--skip-check"] if skip_check else [])]  # fmt: skip
    return start_process(argv, pg.env, root, root / f"worker-{host}.log")


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
    """The host dies: its worker and everything it started, all at once (SIGKILL)."""
    procs = [psutil.Process(worker.pid), *psutil.Process(worker.pid).children(recursive=True)]
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    return [p.pid for p in procs]


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(720)  # one sweep of 4 variants through 3 hosts, waiting out a lost host
def test_a_fleet_sweep_spreads_variants_and_reruns_a_lost_hosts_variant(
    pg_prefect: PrefectServer, tmp_path: Path
):
    sweep, fleet = _write_project(tmp_path)
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
    labels = {"baseline", "eagle3-s1-k1-d2", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4"}
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


@pytest.mark.timeout(600)
def test_a_fleet_runs_an_adaptive_search_handing_out_variants_as_hosts_free_up(
    pg_prefect: PrefectServer, tmp_path: Path
):
    """search: adaptive on two hosts: the search asks again each time a host frees up."""
    sweep, fleet = _write_project(tmp_path)
    sweep["search"] = "adaptive"
    fleet["hosts"] = fleet["hosts"][: len(HOSTS)]  # both alive; no broken host
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    run_id = f"fleet-search-{uuid.uuid4().hex[:6]}"
    deployed = pg_prefect.cli(
        "specsweep", "fleet", "deploy", "-f", "fleet.yaml", "-c", "sweep.yaml", cwd=tmp_path
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    workers = [_start_worker(pg_prefect, tmp_path, h) for h in HOSTS]
    sweep_log = tmp_path / "sweep.log"
    try:
        _wait_for_workers(pg_prefect, fleet["pool"], 2, tmp_path / f"worker-{HOSTS[0]}.log")
        runner = _start_sweep(pg_prefect, tmp_path, run_id, sweep_log)
        workers.append(runner)
        assert runner.wait(timeout=400) == 0, sweep_log.read_text()[-6000:]
    finally:
        for proc in workers:
            stop_process(proc)
    store = ResultsStore(sweep["results_dir"])
    phases = store.read_phase_files(run_id)
    launched = {v for v, _, _ in phases}
    # the baseline and both seeds; the middle chain only if the model said it could win
    assert {"baseline", "eagle3-s1-k1-d2", "eagle3-s3-k1-d4"} <= launched
    assert launched <= {"baseline", "eagle3-s1-k1-d2", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4"}
    assert {t for _, t, _ in phases} <= set(HOSTS)
    run_row = store.read_run(run_id)
    assert run_row["status"] == "completed" and run_row["search_stop"]
    final = store.read_predictions(run_id)
    final = final[final["stage"] == "final"]
    assert set(final["variant"]) == {"baseline", *(f"eagle3-s{n}-k1-d{n + 1}" for n in (1, 2, 3))}
    assert set(final.loc[final["launched"], "variant"]) == launched
