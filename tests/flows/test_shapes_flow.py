"""Load shapes through the real step-sweep flow, Prefect and the simulator: every shape on
one launch per variant, a cell per (shape, concurrency), and a resume that measures only
the missing cell."""

from __future__ import annotations

import pytest

from specsweep.analysis.answer import analyze_run
from specsweep.config.file import parse_config
from specsweep.flows.step_sweep import step_sweep
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow, pytest.mark.slow]

SHAPES = ["in64-out16", "in512-out16"]


def test_shapes_share_a_launch_and_resume_per_cell(tmp_path, port):
    data = sim_config_data(
        tmp_path, port, load={"input_len": [64, 512], "prompts": "builtin", "concurrency": [2]}
    )
    config = parse_config(data)
    run_id = step_sweep(config)["run_id"]
    store = ResultsStore(config.results_dir)
    levels = store.read_levels(run_id)
    cells = set(zip(levels["variant"], levels["shape"], levels["concurrency"], strict=True))
    assert cells == {(v, s, 2) for v in ("baseline", "eagle3-s2-k1-d3") for s in SHAPES}
    assert (levels["status"] == "ok").all()
    assert set(levels["workload"]) == {"builtin"} and set(levels["endpoint"]) == {"chat"}
    # one server per variant measured both shapes: the longer prompts were really sent
    assert len(store.read_phase_files(run_id)) == 2
    long = levels[levels["shape"] == "in512-out16"]
    per_request = long["input_tokens"] / long["completed"]
    assert (per_request > 450).all() and (per_request < 580).all()
    requests = store.read_requests(run_id, columns=["shape", "category"])
    assert set(requests["shape"]) == set(SHAPES)
    assert requests["category"].notna().all()

    answer = analyze_run(store, run_id)
    assert answer.shapes == SHAPES and set(answer.surface["shape"]) == set(SHAPES)
    assert not answer.categories.empty

    gone = store.level_path(run_id, "eagle3-s2-k1-d3", 2, "test-host", "in512-out16")
    kept = store.level_path(run_id, "eagle3-s2-k1-d3", 2, "test-host", "in64-out16")
    before = kept.stat().st_mtime_ns
    gone.unlink()
    step_sweep(config, run_id=run_id)
    assert gone.exists() and kept.stat().st_mtime_ns == before
    assert len(store.read_levels(run_id)) == len(levels)
