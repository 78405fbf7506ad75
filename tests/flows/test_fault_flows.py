"""Faults that need the whole sweep: a variant failing while the sweep goes on (or stops),
a hang during loading, and the orchestrator SIGKILLed mid-sweep then resumed."""

from __future__ import annotations

import json
import re
import subprocess
import time

import psutil
import pytest
import yaml

from specsweep.config import Variant
from specsweep.config.file import parse_config
from specsweep.errors import ConfigError, SweepFailed
from specsweep.flows.matrix_sweep import matrix_sweep
from specsweep.results.store import ResultsStore
from specsweep.targets.local import LocalRunner
from tests.conftest import sim_config_data
from tests.faults.registry import fault
from tests.flows.sweep_cli import matrix_sweep_cli
from tests.flows.test_step_sweep_flow import no_server_left

pytestmark = [pytest.mark.flow, pytest.mark.slow]

SPEC = {"algorithm": "EAGLE3", "draft_model_path": "sim/draft", "topk": 1}


def matrix_data(tmp_path, port, *variants, **load):
    data = sim_config_data(tmp_path, port)
    del data["step_sweep"]
    data["variants"] = [{}, *variants]
    data["load"].update(load)
    return data


def levels_of(config, run_id):
    levels = ResultsStore(config.results_dir).read_levels(run_id)
    return sorted(zip(levels["variant"], levels["concurrency"], strict=True))


@fault(
    "Results directory not writable",
    injected="`results_dir` below a regular file",
    outcome="`ConfigError` naming the directory before anything is launched",
)
def test_unwritable_results_dir_is_refused_before_launch(tmp_path, port):
    blocker = tmp_path / "file"
    blocker.write_text("")
    data = matrix_data(tmp_path, port, concurrency=[1])
    data["results_dir"] = str(blocker / "results")
    config = parse_config(data)
    with pytest.raises(ConfigError, match=re.escape(f"{blocker / 'results'} is not writable")):
        matrix_sweep(config, publish=False)  # the sweep's own pre-flight, not the check alone
    assert not (config.target.workdir / "logs").exists()  # nothing was launched


@fault(
    "Crash during weight loading",
    injected="`SPECSWEEP_SIM_CRASH=load` on one variant (CUDA OOM traceback, tree killed)",
    outcome="that variant fails at once with `ServerDiedError` and the log tail, is never "
    "relaunched, and is recorded in `runs.variant_errors`; the sweep measures the next "
    "variants; with `stop_on_failure: true` the rest are recorded as skipped instead",
)
def test_a_variant_crashing_while_loading_is_recorded_and_the_sweep_goes_on(tmp_path, port):
    crash = {**SPEC, "num_steps": 1, "env": {"SPECSWEEP_SIM_CRASH": "load"}}
    data = matrix_data(tmp_path, port, crash, {**SPEC, "num_steps": 2}, concurrency=[1])
    config = parse_config(data)
    crashed = Variant(**crash).label  # eagle3-s1-k1-d2 plus the suffix of its env
    with pytest.raises(SweepFailed, match=crashed):
        matrix_sweep(config, run_id="goes-on", publish=False)
    assert levels_of(config, "goes-on") == [("baseline", 1), ("eagle3-s2-k1-d3", 1)]
    run = ResultsStore(config.results_dir).read_run("goes-on")
    assert run["status"] == "failed" and run["failed_variants"] == [crashed]
    assert json.loads(run["variant_errors"])[crashed].startswith("ServerDiedError")
    phases = json.loads(run["phases"])
    assert set(phases) == {"baseline", crashed, "eagle3-s2-k1-d3"}
    assert phases["baseline"]["benchmark_s"] > 0 and "benchmark_s" not in phases[crashed]
    log = config.target.workdir / "logs" / "goes-on" / f"{crashed}.log"
    assert log.read_text().count("# specsweep launch:") == 1  # an OOM is never relaunched
    assert json.loads(run["environment"])["versions"]["prefect"]

    stop = parse_config({**data, "stop_on_failure": True})
    with pytest.raises(SweepFailed, match=crashed):
        matrix_sweep(stop, run_id="stops", publish=False)
    assert levels_of(stop, "stops") == [("baseline", 1)]
    run = ResultsStore(stop.results_dir).read_run("stops")
    assert run["skipped_variants"] == ["eagle3-s2-k1-d3"]
    assert no_server_left(port)


@fault(
    "Server crashes in the middle of a level",
    injected="`SPECSWEEP_SIM_CRASH_AFTER_REQUESTS=12` on one variant (a scheduler exception "
    "while serving its first level)",
    outcome="the level is written with its completed and failed requests and status "
    "`failed`; the dead server then ends the variant with `ServerDiedError` and the log "
    "tail: no more levels are tried against it, the variant is recorded in "
    "`runs.variant_errors`, and the other variants are measured at every level",
)
def test_a_server_dying_mid_level_keeps_the_level_and_tries_no_more(tmp_path, port):
    dies = {**SPEC, "num_steps": 1, "env": {"SPECSWEEP_SIM_CRASH_AFTER_REQUESTS": "12"}}
    data = matrix_data(tmp_path, port, dies, concurrency=[4, 8], requests_per_stream=8)
    config = parse_config(data)
    dead = Variant(**dies).label
    with pytest.raises(SweepFailed, match=dead):
        matrix_sweep(config, run_id="dies", publish=False)
    store = ResultsStore(config.results_dir)
    assert levels_of(config, "dies") == [("baseline", 4), ("baseline", 8), (dead, 4)]
    levels = store.read_levels("dies").set_index(["variant", "concurrency"])
    kept = levels.loc[(dead, 4)]
    assert kept["status"] == "failed" and kept["failed"] > 0 and kept["completed"] > 0
    requests = store.read_requests("dies")
    mine = requests[requests["variant"] == dead]
    assert len(mine) == kept["completed"] + kept["failed"]  # every request of it kept
    run = store.read_run("dies")
    assert run["status"] == "failed" and run["failed_variants"] == [dead]
    error = json.loads(run["variant_errors"])[dead]
    assert error.startswith("ServerDiedError") and "died during the level at c=4" in error
    log = config.target.workdir / "logs" / "dies" / f"{dead}.log"  # relaunches append here
    assert log.read_text().count("# specsweep launch:") == 1  # not relaunched for c=8
    assert no_server_left(port)


@fault(
    "Hang during weight loading",
    injected="`SPECSWEEP_SIM_HANG=load` (alive, never binds the port) with `startup_timeout_s: 10`",
    outcome="`ServerStartTimeout` after 10 s with the last log line; the hung server is "
    "killed by the teardown; the other variants are measured",
)
def test_a_hang_while_loading_times_out_and_is_torn_down(tmp_path, port):
    hang = {**SPEC, "num_steps": 1, "env": {"SPECSWEEP_SIM_HANG": "load"}}
    data = matrix_data(tmp_path, port, hang, concurrency=[1])
    # the baseline must be ready within it too: 3 s was too short for it on a loaded machine
    data["server"]["startup_timeout_s"] = 10
    config = parse_config(data)
    hung = Variant(**hang).label  # eagle3-s1-k1-d2 plus the suffix of its env
    with pytest.raises(SweepFailed, match=hung):
        matrix_sweep(config, run_id="hang", publish=False)
    run = ResultsStore(config.results_dir).read_run("hang")
    error = json.loads(run["variant_errors"])[hung]
    assert error.startswith("ServerStartTimeout: server not ready after 10s")
    assert levels_of(config, "hang") == [("baseline", 1)]
    assert LocalRunner(config.target.workdir).state.entries() == []
    assert no_server_left(port)


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@fault(
    "Orchestrator SIGKILLed mid-sweep, then resumed",
    injected="SIGKILL of `specsweep run matrix-sweep` after its first level file; "
    "`--resume RUN_ID`",
    outcome="the killed run keeps its levels and a `running` runs row; the resume frees "
    "the target slot the dead orchestrator held (its pid is gone), kills the orphaned "
    "server (launch record), skips what was written and measures the rest: the same rows "
    "as an uninterrupted run, no duplicates, no server left",
)
def test_sigkill_mid_sweep_then_resume_gives_every_row_once(tmp_path, port):
    data = matrix_data(tmp_path, port, {**SPEC, "num_steps": 2}, concurrency=[1, 2, 4])
    data["load"].update(output_len=32, requests_per_stream=6)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    config = parse_config(data)
    store = ResultsStore(config.results_dir)
    argv, env = matrix_sweep_cli(path)
    first = subprocess.Popen(
        [*argv, "--run-id", "killed"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(lambda: store.has_level("killed", "baseline", 1), 120, "the first level")
    finally:
        first.kill()  # SIGKILL: no finally, no hooks, no teardown
        first.wait()
    before = {c: store.read_levels("killed").query("concurrency == @c")["started_at"].iloc[0]
              for c in (1,)}  # fmt: skip
    assert store.read_run("killed")["status"] == "running"
    orphans = [e["pid"] for e in LocalRunner(config.target.workdir).state.entries()]
    assert orphans and all(psutil.pid_exists(p) for p in orphans), "the server outlived us"

    resumed = subprocess.run(
        [*argv, "--resume", "killed"], env=env, capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    expected = [(v, c) for v in ("baseline", "eagle3-s2-k1-d3") for c in (1, 2, 4)]
    assert levels_of(config, "killed") == sorted(expected)
    levels = store.read_levels("killed")
    assert (
        levels.query("concurrency == 1 and variant == 'baseline'")["started_at"].iloc[0]
        == before[1]
    )  # the level measured before the kill was kept, not measured again
    assert len(store.read_requests("killed")) == sum(
        config.load.num_requests(c) for _, c in expected
    )
    assert store.read_run("killed")["status"] == "completed"
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in orphans)
    assert LocalRunner(config.target.workdir).state.entries() == []
    assert no_server_left(port)
