"""search: adaptive through the real flows, Prefect and the simulator: what it launches,
what it stores apart from the measurements, and that a resumed search changes nothing."""

from __future__ import annotations

import json

import pytest

from specsweep.analysis.answer import analyze_run
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.flows.matrix_sweep import matrix_sweep
from specsweep.flows.nightly_regression import nightly_regression
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data
from tests.faults.registry import fault

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
