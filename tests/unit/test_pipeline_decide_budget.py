"""The measure-more budget grows with what the run's launches cost: on a GPU a pass can take
longer than the fixed 20 s, and settling a level on its launch saves a relaunch (no server
is started here: a host that answers levels from hand-made passes stands in)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from specsweep.analysis.sequential import MeasureMore, Settled
from specsweep.loadgen.metrics import RequestRecord, compute_level_metrics
from specsweep.loadgen.runner import LevelResult
from tests.unit.test_pipeline_calibration import LevelHost, _servers

GPU_LAUNCH_S = 510.0  # 8.5 minutes, the seeds' box
# the budget's defaults (the tests' sim config turns measuring more off), no calibration
DEFAULTS = {"calibrate_drift": False, "decide_budget_s": 20.0}


def test_the_budget_is_the_fixed_part_plus_a_share_of_every_launch_so_far(tmp_path):
    baseline, spec = _servers(tmp_path, LevelHost([1.0]), **DEFAULTS)
    assert baseline.decide_budget_s() == 20.0  # nothing launched yet
    baseline.phases.seconds["launch_to_ready_s"] = GPU_LAUNCH_S
    assert baseline.decide_budget_s() == pytest.approx(20.0 + 0.25 * GPU_LAUNCH_S)
    baseline._write_phases()  # the baseline's launch is on record for the next variant
    spec.phases.seconds["launch_to_ready_s"] = 490.0
    assert spec.decide_budget_s() == pytest.approx(20.0 + 0.25 * (GPU_LAUNCH_S + 490.0))


@pytest.mark.parametrize(("share", "budget"), [(0.0, 20.0), (0.5, 0.0)])
def test_no_share_leaves_the_fixed_budget_and_a_zero_budget_stays_off(tmp_path, share, budget):
    baseline, _ = _servers(
        tmp_path, LevelHost([1.0]), calibrate_drift=False,
        decide_launch_share=share, decide_budget_s=budget,
    )  # fmt: skip
    baseline.phases.seconds["launch_to_ready_s"] = GPU_LAUNCH_S
    assert baseline.decide_budget_s() == budget


class SlowNoisyHost(LevelHost):
    """Passes of eight sequential requests of 8 tokens, 7.5 s each: their server steps
    alternate 8 and 4 (tokens per step 1 and 2, as speculation's acceptance varies), so one
    pass reads ±11%, wider than the ±2% the reference is measured to, and takes 60 s."""

    def run_level(self, server, concurrency, load, on_progress=None, drift=None) -> LevelResult:
        records = []
        for k in range(load.repeats):
            for i in range(8):
                t0 = 100.0 * k + 7.5 * i
                steps = 8 if i % 2 else 4
                times = tuple(t0 + 7.5 * (j + 1) / steps for j in range(steps))
                records.append(
                    RequestRecord(
                        i, t0, times[-1], times, (8 // steps,) * steps, 8, 8, "length", None,
                        None, None, k,
                    )
                )  # fmt: skip
        now = datetime.now(UTC)
        metrics = compute_level_metrics(records, concurrency, 0.05, drift)
        return LevelResult(metrics, tuple(records), now, now, perf_origin=0.0)


def test_a_pass_longer_than_the_fixed_budget_is_measured_once_launches_cost_minutes(tmp_path):
    """The baseline at c=1, one noisy pass, asks for more passes; one pass takes 60 s, more
    than the 10 s precision share of 20 s. After a launch of 8.5 minutes the budget is
    147.5 s (its precision share 73.75 s) and one more pass is measured."""
    baseline, _ = _servers(tmp_path, SlowNoisyHost([7.5]), **DEFAULTS)
    baseline.benchmark_level(1)
    quick = baseline.next_to_decide()
    assert isinstance(quick, Settled) and "budget is spent (0 of 20 s" in quick.reason
    baseline.phases.seconds["launch_to_ready_s"] = GPU_LAUNCH_S
    step = baseline.next_to_decide()
    assert isinstance(step, MeasureMore) and (step.concurrency, step.passes) == (1, 1)
    assert "the reference of every ratio" in step.reason
