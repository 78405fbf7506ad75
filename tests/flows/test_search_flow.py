"""search: adaptive through the real flows, Prefect and the simulator: what it launches,
what it stores apart from the measurements, and that a resumed search changes nothing."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from specsweep.analysis.answer import analyze_run
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.flows.matrix_sweep import matrix_sweep
from specsweep.flows.nightly_regression import nightly_regression
from specsweep.report.search import cost_text
from specsweep.results.store import ResultsStore
from specsweep.search.model import SpecModel
from specsweep.targets.local import LocalRunner
from tests.conftest import sim_config_data
from tests.faults.registry import fault
from tests.flows.sweep_cli import matrix_sweep_cli
from tests.flows.test_step_sweep_flow import no_server_left

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def _launch_order(store: ResultsStore, run_id: str) -> list[str]:
    phases = store.read_phase_files(run_id)
    return [v for v, _, p in sorted(phases, key=lambda f: f[2]["held_from_unix"])]


def test_an_adaptive_search_launches_what_can_win_and_keeps_predictions_apart(tmp_path, port):
    data = sim_config_data(
        tmp_path,
        port,
        step_sweep=None,
        grid_sweep={"draft_model_path": "sim/draft", "num_steps": [1, 2, 3, 6], "topk": [1, 4]},
        # 4 launches: the baseline, both seed chains and one the model chose (what each
        # model choice must show is asserted per choice below)
        search={"mode": "adaptive", "max_launches": 4},
        load={"concurrency": [1, 4, 16], "requests_per_stream": 4, "output_len": 32},
    )
    config = parse_config(data)
    grid = [v.label for v in sweep_variants(config)]
    result = matrix_sweep(config)
    run_id = result["run_id"]
    store = ResultsStore(config.results_dir)
    order = _launch_order(store, run_id)
    assert order[:3] == ["baseline", "eagle3-s1-k1-d2", "eagle3-s6-k1-d7"]  # then the model
    assert 3 <= len(order) <= 4 and set(order) <= set(grid)
    run = store.read_run(run_id)
    assert run["status"] == "completed" and run["search_stop"]
    if len(order) == 4:
        assert run["search_stop"] == "budget spent: max_launches 4 reached"

    levels = store.read_levels(run_id)
    assert set(levels["variant"]) == set(order)  # nothing of an unlaunched variant
    assert set(levels["status"]) <= {"ok", "skipped"}
    skipped = levels[levels["status"] == "skipped"]
    assert skipped["output_throughput"].isna().all() and skipped["error"].notna().all()

    # each speculative request carries sglang's histogram of drafts accepted per verify
    # step, stored as sent; the model reads acceptance per position from it
    requests = store.read_requests(run_id)
    spec = requests[requests["variant"] != "baseline"]
    hists = spec["spec_correct_drafts_histogram"]
    assert hists.map(lambda h: h is not None and len(h) > 0).all()
    assert [int(sum(h)) for h in hists] == list(spec["spec_verify_ct"])
    acc = SpecModel.fit(levels, requests).describe()["acceptance"]
    assert isinstance(acc, dict) and acc["source"] == "histograms", acc

    predictions = store.read_predictions(run_id)
    final = predictions[predictions["stage"] == "final"]
    assert set(final["variant"]) == set(grid)  # every variant of the grid, predicted
    assert (final["predicted_lo"] <= final["predicted_output_throughput"]).all()
    assert (final["predicted_output_throughput"] <= final["predicted_hi"]).all()
    missing = final[~final["launched"]]
    assert set(missing["variant"]) == set(grid) - set(order)
    assert missing["reason"].str.len().gt(0).all()
    before = predictions[predictions["stage"] == "before_launch"]
    # the model's choices were predicted before their launch, from earlier measurements only
    for variant in order[3:]:
        rows = before[before["variant"] == variant]
        assert not rows.empty, variant
        assert variant not in json.loads(rows["fit_on"].iloc[0])

    answer = analyze_run(store, run_id)
    assert set(answer.first.throughput.columns) <= set(order)  # the answer: measurements only
    assert answer.search_stop == run["search_stop"]
    # what it cost, both ways: launches against the grid's, server time held (measured)
    # against the whole grid's (estimated from this run's launches and levels)
    cost = answer.first.search.server_time()
    assert cost is not None and (cost.holds, cost.launched, cost.grid) == (
        len(order),
        len(order),
        len(grid),
    )
    assert 0 < cost.launch_s < cost.held_s < cost.grid_s

    # a resumed search reads the same store and makes the same choices: nothing new runs
    logs = sorted((config.target.workdir / "logs" / run_id).iterdir())
    again = matrix_sweep(config, run_id=run_id)
    assert again["run_id"] == run_id
    assert sorted((config.target.workdir / "logs" / run_id).iterdir()) == logs
    assert len(store.read_levels(run_id)) == len(levels)


def test_the_nightly_flow_runs_the_search_and_judges_what_it_measured(tmp_path, port):
    data = sim_config_data(
        tmp_path,
        port,
        step_sweep={"algorithm": "EAGLE3", "draft_model_path": "sim/draft", "num_steps": [1, 2, 4]},
        search="adaptive",
        load={"concurrency": [1, 4, 16]},
    )
    config = parse_config(data)
    result = nightly_regression(config, run_id="night-1")
    store = ResultsStore(config.results_dir)
    run = store.read_run("night-1")
    assert run["search_stop"] and result["regressed"] is False
    launched = {v for v, _, _ in store.read_phase_files("night-1")}
    assert {"baseline", "eagle3-s1-k1-d2", "eagle3-s4-k1-d5"} <= launched
    assert "failed" not in result["verdict"]


@fault(
    "Server ignores continuous_usage_stats",
    injected="`SPECSWEEP_SIM_NO_CONTINUOUS_USAGE=1` with `load.endpoint: completions` and "
    "`search: adaptive` (chunks carry `usage: null`; a speculative chunk holds several "
    "uncounted tokens)",
    outcome="output tokens come from the final usage; `chunk_tokens_unknown` counts the "
    "requests whose chunks did not add up, their chunk tokens and ITL are stored unknown "
    "(null), never one token each; the search fits no acceptance from them, launches "
    "what it cannot predict and its `search_stop` says it searched blind and why",
)
def test_a_server_ignoring_continuous_usage_leaves_the_search_blind(tmp_path, port):
    """Issue 29: chunks without usage are not one token each. The level rows count the
    requests whose chunks did not add up, their chunk tokens are stored unknown, and the
    search, with no acceptance it can trust (OpenAI endpoints carry no verify steps),
    launches what it cannot predict and says it searched blind."""
    data = sim_config_data(
        tmp_path,
        port,
        step_sweep=None,
        grid_sweep={"draft_model_path": "sim/draft", "num_steps": [1, 2, 4], "topk": [1]},
        search={"mode": "adaptive"},
        load={"concurrency": [1, 4], "requests_per_stream": 3, "output_len": 32,
              "endpoint": "completions"},
    )  # fmt: skip
    data["server"]["env"]["SPECSWEEP_SIM_NO_CONTINUOUS_USAGE"] = "1"
    config = parse_config(data)
    run_id = matrix_sweep(config)["run_id"]
    store = ResultsStore(config.results_dir)
    levels = store.read_levels(run_id)
    assert set(levels["status"]) == {"ok"}
    spec = levels[~levels["is_baseline"]]
    base = levels[levels["is_baseline"]]
    assert (spec["chunk_tokens_unknown"] == spec["completed"]).all()  # every request
    assert (base["chunk_tokens_unknown"] == 0).all()  # one token per chunk adds up
    assert spec["accept_length"].isna().all() and spec["itl_ms_p50"].isna().all()
    assert (levels["output_tokens"] == levels["completed"] * 32).all()  # from the usage
    requests = store.read_requests(run_id)
    mine = requests[requests["variant"].isin(spec["variant"])]
    assert mine["chunk_tokens"].isna().all() and mine["max_chunk_tokens"].isna().all()
    assert (mine["chunks"] > 0).all()
    assert set(_launch_order(store, run_id)) == set(levels["variant"])
    assert len(set(levels["variant"])) == 4  # nothing ruled out on a blind model
    stop = store.read_run(run_id)["search_stop"]
    assert "searching blind" in stop and "do not add up to the server's usage" in stop


def _held_from(store: ResultsStore, run_id: str) -> dict[str, float]:
    return {v: p["held_from_unix"] for v, _, p in store.read_phase_files(run_id)}


@fault(
    "Adaptive search SIGKILLed mid-run, then resumed",
    injected="SIGKILL of `specsweep run matrix-sweep` (`search: adaptive`) once its second "
    "seed chain has measured its first level; `--resume RUN_ID`",
    outcome="the resume finishes the interrupted variant's missing levels first, launches "
    "no variant whose levels were all measured, then goes on choosing from what is stored: "
    "it ends with the uninterrupted search's decision at every level that one decides "
    "clearly, with no level measured twice and no server left",
)
def test_a_search_killed_mid_run_resumes_to_the_same_decision(tmp_path, port):
    """Issue 30: a search is resumable. The same search runs once uninterrupted (the
    reference) and once SIGKILLed mid-run and resumed with `--resume`, as a user would."""
    data = sim_config_data(
        tmp_path,
        port,
        step_sweep=None,
        grid_sweep={"draft_model_path": "sim/draft", "num_steps": [1, 2, 3, 6], "topk": [1]},
        search={"mode": "adaptive", "max_launches": 4},
        # a clear answer (speculation at c=1, none at 16), as the fleet's search test
        load={"concurrency": [1, 16], "output_len": 64, "min_requests": 16,
              "requests_per_stream": 4},
    )  # fmt: skip
    data["server"]["env"]["SPECSWEEP_SIM_TIME_SCALE"] = "0.1"
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    config = parse_config(data)
    store = ResultsStore(config.results_dir)
    reference = analyze_run(store, matrix_sweep(config, run_id="whole")["run_id"])

    argv, env = matrix_sweep_cli(path)
    killed = subprocess.Popen(
        [*argv, "--run-id", "killed"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    seed = "eagle3-s6-k1-d7"  # the second seed chain: the third launch
    try:
        deadline = time.monotonic() + 180
        while not store.has_level("killed", seed, 1):
            assert killed.poll() is None and time.monotonic() < deadline, "no level of " + seed
            time.sleep(0.05)
    finally:
        killed.kill()  # SIGKILL: no finally, no hooks, no teardown
        killed.wait()
    before = store.read_levels("killed").set_index(["variant", "concurrency"])["started_at"]
    held_before = _held_from(store, "killed")
    complete = {"baseline", "eagle3-s1-k1-d2"}  # every level measured before the kill
    assert complete | {seed} == set(held_before)
    assert store.read_run("killed")["status"] == "running"

    resumed = subprocess.run(
        [*argv, "--resume", "killed"], env=env, capture_output=True, text=True, timeout=240
    )
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-4000:]
    run = store.read_run("killed")
    assert run["status"] == "completed" and run["search_stop"], run

    # Nothing measured was measured again, nothing complete was launched again; the
    # interrupted seed was finished first, then the search chose from what is stored.
    levels = store.read_levels("killed")
    assert not levels.duplicated(["variant", "concurrency"]).any()
    after = levels.set_index(["variant", "concurrency"])["started_at"]
    for key, started in before.items():
        assert after[key] == started, key
    held_after = _held_from(store, "killed")
    assert {v: held_after[v] for v in complete} == {v: held_before[v] for v in complete}
    assert held_after[seed] > held_before[seed]  # relaunched for its missing level
    # ... and the run's server time counts both its holds: the killed one until the
    # level it wrote, beside the relaunch (results/phases.py), as the report says
    records = {v: p for v, _, p in store.read_phase_files("killed")}
    assert records[seed]["holds"] == 2 and records[seed]["held_before_s"] > 0
    assert {records[v]["holds"] for v in records if v != seed} == {1}
    cost = cost_text(analyze_run(store, "killed").first.search)
    assert cost is not None and "(1 a relaunch)" in cost, cost
    order = sorted(held_after, key=held_after.get)
    assert order[:3] == ["baseline", "eagle3-s1-k1-d2", seed], order
    assert len(order) <= 4 and set(levels["variant"]) == set(order)
    assert set(levels["status"]) <= {"ok", "skipped"}

    # The same decision as the uninterrupted search wherever that one is clear; where it
    # decided a tie (c=1 on a loaded machine: s3 best, the 6-step seed within its noise,
    # one pass of 16 requests each), speculation there too.
    ref = reference.decisions.first
    got = analyze_run(store, "killed").decisions.first
    assert ref is not None and got is not None
    decided = {j.concurrency: j.choice for j in ref.judgments if j.decided}
    assert decided.get(1, "baseline") != "baseline", ref.judgments  # speculation pays at c=1
    clear = {j.concurrency: j.choice for j in ref.judgments if j.status == "clear"}
    assert {c: got.choice_at()[c] for c in clear} == clear, (ref.judgments, got.judgments)
    speculates = {c for c, choice in decided.items() if choice != "baseline"}
    assert all(got.choice_at()[c] != "baseline" for c in speculates), got.judgments
    assert no_server_left(port)
    assert LocalRunner(config.target.workdir).state.entries() == []
