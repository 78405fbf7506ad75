"""Deployments on a real Prefect server with a real process worker, driven by the CLI.

What a user does from a terminal or a CI job: `prefect deployment run ... --watch`
(exit code = the run's outcome), the nightly schedule as registered, and a
cancelled sweep that must leave no server process behind (issue 5).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from typing import Any

import pandas as pd
import psutil
import pytest
import yaml

from specsweep.config.schedule import NIGHTLY_CRON, NIGHTLY_TIMEZONE
from specsweep.targets.launch_record import LaunchState
from tests.e2e.conftest import TARGET, PrefectStack, as_param, flow_run_id
from tests.faults.registry import fault

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def port_answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def watch_step_sweep(
    stack: PrefectStack, data: dict[str, Any], run_id: str
) -> subprocess.CompletedProcess[str]:
    """`prefect deployment run step-sweep/step-sweep` with this config and run id, watched."""
    return stack.cli(
        "prefect", "deployment", "run", "step-sweep/step-sweep", "--param", as_param(data),
        "--param", f"run_id={run_id}", "--watch", "--watch-timeout", "150",
    )  # fmt: skip


def artifact_keys(stack: PrefectStack, run_id: str) -> set[str]:
    """The keys of the artifacts a flow run published."""
    flt = {"artifacts": {"flow_run_id": {"any_": [run_id]}}}
    return {a["key"] for a in stack.post("/artifacts/filter", flt)}


def test_step_sweep_from_the_cli_watches_the_run_to_completion(prefect_stack: PrefectStack):
    # The deployment's defaults (from `specsweep deploy -c sweep.yaml`) plus one --param.
    proc = prefect_stack.cli(
        "prefect", "deployment", "run", "step-sweep/step-sweep",
        "--param", "run_id=cli-run", "--watch", "--watch-timeout", "150",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Flow run finished successfully in 'Completed'" in proc.stdout
    run = prefect_stack.get(f"/flow_runs/{flow_run_id(proc.stdout)}")
    assert run["state_type"] == "COMPLETED"
    assert run["name"] == f"step-sweep/{TARGET}/steps=2/c=1,2"
    levels = pd.read_parquet(prefect_stack.project / "results" / "levels" / "cli-run")
    assert sorted(zip(levels["variant"], levels["concurrency"], strict=True)) == [
        ("baseline", 1), ("baseline", 2), ("eagle3-s2-k1-d3", 1), ("eagle3-s2-k1-d3", 2),
    ]  # fmt: skip
    assert set(levels["status"]) == {"ok"} and set(levels["target"]) == {TARGET}
    assert (levels["output_throughput"] > 0).all()
    runs = pd.read_parquet(prefect_stack.project / "results" / "runs")
    assert runs.set_index("run_id").at["cli-run", "status"] == "completed"


def test_a_deployment_run_exports_and_verifies_its_policy(prefect_stack: PrefectStack, tmp_path):
    # verify_policy from the run's parameters, as the UI form or a --param gives it
    # (only the export is launched after the sweep: the e2e worker is the suite's long pole)
    verify = {"pinned_zero": False, "default_tiers": False}
    # 12 requests at c=1: the export decides on the levels' 95% intervals (one tie rule), and
    # 4 requests on a loaded machine can leave a 1.5x lead inside them (then it rightly refuses)
    data = prefect_stack.sweep_config(
        tmp_path, load={"concurrency": [1], "min_requests": 12}, verify_policy=verify
    )
    # simulated time at half of real time: speculation's 1.5x at c=1 survives a loaded machine
    # (at a twentieth, CPU starvation can flatten it and the export rightly refuses)
    data["server"]["env"]["SPECSWEEP_SIM_TIME_SCALE"] = "0.5"
    proc = watch_step_sweep(prefect_stack, data, "verify-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    levels = pd.read_parquet(tmp_path / "results" / "levels" / "verify-run")
    adaptive = levels[levels["adaptive"].fillna(False).astype(bool)]
    exported = adaptive[adaptive["adaptive_config"].notna()]
    assert len(exported) == 1 and exported["variant"].iloc[0].startswith("eagle3-adaptive-")
    assert set(adaptive["variant"]) == {exported["variant"].iloc[0]}
    assert set(adaptive["status"]) == {"ok"}
    assert exported["adaptive_steps_share"].notna().all()
    keys = artifact_keys(prefect_stack, flow_run_id(proc.stdout))
    assert {"specsweep-answer", "specsweep-adaptive-export"} <= keys


def test_a_deployment_runs_an_adaptive_search_over_shapes_of_real_prompts(
    prefect_stack: PrefectStack, tmp_path
):
    # `search: adaptive` as the form's string shorthand, in the step-sweep deployment, over
    # two load shapes of the bundled real prompts (the search compares cells)
    data = prefect_stack.sweep_config(
        tmp_path,
        load={"concurrency": [1, 2], "input_len": [64, 512], "prompts": "builtin"},
        step_sweep={"algorithm": "EAGLE3", "draft_model_path": "sim/draft", "num_steps": [1, 2, 3]},
        search="adaptive",
    )
    proc = watch_step_sweep(prefect_stack, data, "search-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    levels = pd.read_parquet(tmp_path / "results" / "levels" / "search-run")
    # the baseline and the two seed chains always run; the middle one only if it can win
    assert {"baseline", "eagle3-s1-k1-d2", "eagle3-s3-k1-d4"} <= set(levels["variant"])
    assert set(levels["shape"]) == {"in64-out16", "in512-out16"}
    assert set(levels["workload"]) == {"builtin"} and set(levels["endpoint"]) == {"chat"}
    runs = pd.read_parquet(tmp_path / "results" / "runs").set_index("run_id")
    assert runs.at["search-run", "search_stop"]  # why it stopped launching, kept with the run
    final = pd.read_parquet(tmp_path / "results" / "predictions" / "search-run")
    assert set(final["stage"]) >= {"final"} and final["predicted_hi"].notna().all()
    keys = artifact_keys(prefect_stack, flow_run_id(proc.stdout))
    assert "specsweep-search" in keys


def test_an_algorithm_sweep_from_the_cli_answers_which_algorithm_to_run(
    prefect_stack: PrefectStack, tmp_path
):
    """Issue 31: `prefect deployment run algorithm-sweep/algorithm-sweep` with a config of
    its own (DFLASH, NGRAM), watched: the baseline and every enabled
    setting measured under their stable names, launched with sglang's own flags, and the
    answer published."""
    data = prefect_stack.sweep_config(
        tmp_path,
        load={"concurrency": [1]},
        algorithm_sweep={
            "dflash": {"draft_model_path": "sim/dflash", "block_size": [4]},
            "ngram": {"num_draft_tokens": [6]},
        },
    )
    del data["step_sweep"]
    proc = prefect_stack.cli(
        "prefect", "deployment", "run", "algorithm-sweep/algorithm-sweep",
        "--param", as_param(data), "--param", "run_id=cli-algorithms",
        "--watch", "--watch-timeout", "150",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = prefect_stack.get(f"/flow_runs/{flow_run_id(proc.stdout)}")
    assert run["state_type"] == "COMPLETED"
    assert run["name"].startswith(f"algorithm-sweep/{TARGET}/"), run["name"]
    levels = pd.read_parquet(tmp_path / "results" / "levels" / "cli-algorithms")
    assert set(levels["status"]) == {"ok"}, levels[["variant", "status"]]
    assert sorted(levels["variant"]) == ["baseline", "dflash-b4", "ngram-w10-d6"]
    commands = dict(zip(levels["variant"], levels["server_command"], strict=True))
    assert "--speculative-dflash-block-size 4" in commands["dflash-b4"]
    assert "--speculative-algorithm NGRAM" in commands["ngram-w10-d6"]
    assert "--speculative-algorithm" not in commands["baseline"]
    keys = artifact_keys(prefect_stack, flow_run_id(proc.stdout))
    assert "specsweep-answer" in keys


def test_a_failed_run_makes_the_cli_exit_non_zero(prefect_stack: PrefectStack, tmp_path):
    # A config without a step_sweep section: the flow fails before launching anything.
    data = prefect_stack.sweep_config(tmp_path)
    del data["step_sweep"]
    data["variants"] = [{}]
    proc = prefect_stack.cli(
        "prefect", "deployment", "run", "step-sweep/step-sweep", "--param", as_param(data),
        "--watch", "--watch-timeout", "120",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Flow run finished in state 'Failed'" in proc.stdout
    run = prefect_stack.get(f"/flow_runs/{flow_run_id(proc.stdout)}")
    assert run["state_type"] == "FAILED"
    assert "needs a step_sweep section" in run["state"]["message"]


def test_the_nightly_schedule_is_registered_with_its_cron_and_timezone(
    prefect_stack: PrefectStack,
):
    deployment = prefect_stack.get("/deployments/name/nightly-regression/nightly-regression")
    [entry] = deployment["schedules"]
    assert entry["schedule"]["cron"] == NIGHTLY_CRON == "0 2 * * *"
    assert entry["schedule"]["timezone"] == NIGHTLY_TIMEZONE == "Europe/Berlin"
    assert entry["active"] is True and deployment["paused"] is False
    assert deployment["parameters"]["config"]["target"]["more"]["name"] == TARGET
    for name in ("step-sweep", "topk-sweep", "matrix-sweep"):
        assert prefect_stack.get(f"/deployments/name/{name}/{name}")["schedules"] == []


@fault(
    "Flow cancelled from Prefect",
    injected="`prefect flow-run cancel` on a step sweep run by a process worker while a level runs",
    outcome=(
        "the level stops at once (the SIGTERM reaches Prefect through the load generator's "
        "event loop), the variant's teardown and the cancellation hooks stop the server, "
        "the run ends Cancelled: no server process, port closed, launch record empty"
    ),
)
def test_cancelling_a_sweep_leaves_no_server_running(prefect_stack: PrefectStack, tmp_path):
    """Issue 5: cancel through the API while a server runs; nothing may survive it."""
    # Its own target, so the slot its killed process leaves leased blocks no other test;
    # creating that target's limit is part of what a user does for a new host.
    data = prefect_stack.sweep_config(
        tmp_path,
        target="e2e-cancel-host",
        load={"concurrency": [1], "output_len": 256, "requests_per_level": 500},
    )
    data["server"]["env"]["SPECSWEEP_SIM_TIME_SCALE"] = "1"  # a level that runs for minutes
    port = data["server"]["port"]
    (tmp_path / "cancel.yaml").write_text(yaml.safe_dump(data))
    limit = prefect_stack.cli("specsweep", "limits", "create", "-c", str(tmp_path / "cancel.yaml"))
    assert "specsweep-target-e2e-cancel-host: created (limit 1)" in limit.stdout, limit.stderr
    state = LaunchState(tmp_path / "work" / "launched.json")
    proc = prefect_stack.cli(
        "prefect", "deployment", "run", "step-sweep/step-sweep", "--param", as_param(data)
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = flow_run_id(proc.stdout)

    deadline = time.monotonic() + 90
    while not (state.entries() and port_answers(port)):
        assert time.monotonic() < deadline, prefect_stack.get(f"/flow_runs/{run_id}")["state"]
        time.sleep(0.3)
    recorded = [(e["pid"], e["pgid"]) for e in state.entries()]
    server_procs = [psutil.Process(pid) for pid, _ in recorded]
    server_procs += [c for p in server_procs for c in p.children(recursive=True)]
    assert server_procs

    cancel = prefect_stack.cli("prefect", "flow-run", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    run = prefect_stack.wait_state(run_id, {"CANCELLED", "FAILED", "CRASHED", "COMPLETED"}, 90)
    assert run["state_type"] == "CANCELLED", run["state"]

    deadline = time.monotonic() + 15  # the hook kills; give the kernel a moment to reap
    while survivors := [p.pid for p in server_procs if alive(p)]:
        assert time.monotonic() < deadline, f"server processes survived the cancel: {survivors}"
        time.sleep(0.2)
    assert not port_answers(port)
    assert state.entries() == []  # the launch record is cleared, nothing to kill next time
    # the level stopped at once and the variant's own `finally` tore its server down (its
    # phases say how long), not only the worker's SIGKILL and the hook after it
    sidecars = list((tmp_path / "results" / "phases").rglob("*.json"))
    phases = [json.loads(path.read_text()) for path in sidecars]
    assert phases and all("teardown_s" in p for p in phases), phases
