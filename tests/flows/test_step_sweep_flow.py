"""A small step sweep through the real flows, Prefect API and simulator."""

from __future__ import annotations

import contextlib
import json
import os
import sys

import psutil
import pytest

from specsweep.analysis.answer import analyze_run
from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import ServerDiedError, SweepFailed
from specsweep.flows.benchmark_variant import benchmark_variant
from specsweep.flows.step_sweep import step_sweep
from specsweep.report.evidence import target_ci_line
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore
from specsweep.targets.cleanup import SGLANG_MARKERS
from specsweep.targets.local import LocalRunner
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def no_server_left(port: int) -> bool:
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        alive = proc.info["status"] != psutil.STATUS_ZOMBIE
        if alive and f"--port {port}" in cmd and any(m in cmd for m in SGLANG_MARKERS):
            return False
    return True


def test_step_sweep_writes_one_row_per_variant_and_level(tmp_path, port):
    data = sim_config_data(tmp_path, port)
    # Simulated time at a fifth of real time, not a twentieth: a request of 16 tokens then
    # streams for ~30 ms, not ~8 ms. On a loaded machine (three workers on two cores) the
    # load generator once slept through every request of a level and read each one's
    # chunks at once: every ITL 0 ms, the interval [0, 0] (true, and no interval to check).
    data["server"]["env"]["SPECSWEEP_SIM_TIME_SCALE"] = "0.2"
    config = parse_config(data)
    result = step_sweep(config)
    run_id = result["run_id"]
    store = ResultsStore(config.results_dir)
    levels = store.read_levels(run_id)
    assert sorted(zip(levels["variant"], levels["concurrency"], strict=True)) == [
        ("baseline", 1), ("baseline", 4), ("eagle3-s2-k1-d3", 1), ("eagle3-s2-k1-d3", 4),
    ]  # fmt: skip
    assert set(levels["status"]) == {"ok"} and (levels["failed"] == 0).all()
    assert (levels["simulated"]).all() and (levels["run_id"] == run_id).all()
    for name in ("output_throughput", "request_throughput", "ttft_ms_p50", "itl_ms_p99"):
        lo, value, hi = levels[f"{name}_lo"], levels[name], levels[f"{name}_hi"]
        assert ((lo <= value) & (value <= hi) & (lo < hi)).all(), name
    assert levels["target_ci"].isna().all() and levels["target_ci_met"].isna().all()
    assert levels["sglang_version"].str.contains("sim").all()
    spec = levels[~levels["is_baseline"]]
    assert spec["accept_length"].between(1.0, 3.0).all() and (spec["num_steps"] == 2).all()
    assert levels.loc[levels["is_baseline"], "accept_length"].isna().all()
    expected_tokens = [config.load.num_requests(c) * 16 for c in levels["concurrency"]]
    assert list(levels["output_tokens"]) == expected_tokens
    assert "--speculative-num-steps 2" in spec["server_command"].iloc[0]
    requests = store.read_requests(run_id)
    assert len(requests) == sum(config.load.num_requests(c) for c in levels["concurrency"])
    assert (requests["output_tokens"] == 16).all() and requests["error"].isna().all()
    assert (requests["chunk_tokens"].map(sum) == requests["output_tokens"]).all()
    assert (requests["sent_at"] <= requests["first_token_at"]).all()
    assert (requests["first_token_at"] <= requests["ended_at"]).all()
    spec_requests = requests[requests["variant"] == "eagle3-s2-k1-d3"]
    assert (spec_requests["max_chunk_tokens"] > 1).any()
    run = store.read_run(run_id)
    assert run["status"] == "completed" and run["variants"] == ["baseline", "eagle3-s2-k1-d3"]
    assert LocalRunner(config.target.workdir).state.entries() == []  # every server torn down
    assert no_server_left(port)

    # Resuming the finished run launches nothing and measures nothing again.
    logs = sorted((config.target.workdir / "logs" / run_id).iterdir())
    again = step_sweep(config, run_id=run_id)
    assert again["run_id"] == run_id
    assert sorted((config.target.workdir / "logs" / run_id).iterdir()) == logs
    assert len(store.read_levels(run_id)) == 4


def test_a_level_measured_until_sure_records_its_effort_and_says_when_it_fell_short(tmp_path, port):
    """target_ci out of reach: each level runs passes up to max_requests, records them, and
    the run's summary names the levels that missed the target."""
    load = {"concurrency": [2], "target_ci": 1e-6, "max_requests": 12}
    config = parse_config(sim_config_data(tmp_path, port, load=load))
    run_id = step_sweep(config)["run_id"]
    levels = ResultsStore(config.results_dir).read_levels(run_id)
    assert list(levels["repeats"]) == [3, 3]  # passes of 4 requests up to 12
    assert list(levels["completed"]) == [12, 12]
    assert list(levels["target_ci"]) == [1e-6, 1e-6]
    assert list(levels["target_ci_met"]) == [False, False]
    answer = analyze_run(ResultsStore(config.results_dir), run_id)
    line = target_ci_line(answer.first.levels)
    assert line.startswith("Target interval ±0.0% (load.target_ci) missed at 2 of 2 levels")
    best = answer.first.best.set_index("concurrency")
    assert best.at[2, "best_lo"] < best.at[2, "best_throughput"] < best.at[2, "best_hi"]


def test_a_crashing_server_fails_the_run_but_keeps_going_and_cleans_up(tmp_path, port):
    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["SPECSWEEP_SIM_CRASH"] = "load"
    config = parse_config(data)
    with pytest.raises(SweepFailed, match="baseline, eagle3-s2-k1-d3"):
        step_sweep(config, run_id="crash-run")
    store = ResultsStore(config.results_dir)
    run = store.read_run("crash-run")
    assert run["status"] == "failed"
    assert run["failed_variants"] == ["baseline", "eagle3-s2-k1-d3"]
    errors = json.loads(run["variant_errors"])
    assert errors["baseline"].startswith("ServerDiedError: server process exited")
    log = config.target.workdir / "logs" / "crash-run" / "baseline.log"
    assert log.read_text().count("# specsweep launch:") == 1  # an OOM is never relaunched
    assert store.read_levels("crash-run").empty
    assert LocalRunner(config.target.workdir).state.entries() == []
    assert no_server_left(port)


def test_a_port_conflict_is_relaunched_then_reported(tmp_path, port):
    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["SPECSWEEP_SIM_PORT_IN_USE"] = "1"
    data["server"]["start_attempts"] = 2
    config = parse_config(data)
    ctx = RunContext("bind-run", "step_sweep", "t", "local")
    with pytest.raises(ServerDiedError, match="server process exited") as exc:
        benchmark_variant(config, BASELINE, ctx)
    assert exc.value.transient
    log = config.target.workdir / "logs" / "bind-run" / "baseline.log"
    assert log.read_text().count("# specsweep launch:") == 2
    assert LocalRunner(config.target.workdir).state.entries() == []
    assert no_server_left(port)


@pytest.mark.xdist_group("orphans")
def test_a_sweep_ends_with_the_gpus_memory_back_and_says_so(tmp_path, port, monkeypatch):
    """Orphaned schedulers on every variant (sglang issue 23627): after the last variant's
    teardown nothing of ours holds the GPU, and the run says what it held before and after."""
    from prefect.artifacts import Artifact

    from specsweep.sim.gpu_inventory import Inventory
    from specsweep.sim.nvidia_smi import BIN_DIR
    from tests.integration.test_gpu_cleanup import H200_MIB

    state = tmp_path / "gpus"
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_STATE", str(state))
    monkeypatch.setenv("SPECSWEEP_SIM_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}")
    inv = Inventory(state)
    inv.ensure("NVIDIA H200", 1, H200_MIB)
    data = sim_config_data(tmp_path, port, load={"concurrency": [1]})
    data["server"].update(stop_grace_s=1)
    data["server"]["env"].update(SPECSWEEP_SIM_ORPHAN="1", CUDA_VISIBLE_DEVICES="0")
    config = parse_config(data)
    run_id = step_sweep(config)["run_id"]
    try:
        assert [a.pid for a in inv.charged() if psutil.pid_exists(a.pid)] == []
        assert inv.used_mib(inv.gpus()[0]) == 0
        phases = json.loads(ResultsStore(config.results_dir).read_run(run_id)["phases"])
        assert {v["gpu_mib_after_teardown"] for v in phases.values()} == {0.0}
        said = (
            "GPU memory on test-host: 0 MiB in use before the sweep, 0 MiB after its last teardown"
        )
        summary = Artifact.get("step-sweep-summary")
        assert summary is not None and said in str(summary.data) and run_id in str(summary.data)
    finally:
        for a in inv.charged():
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(a.pid).kill()
