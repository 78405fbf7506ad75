"""A fleet's nightly history is per GPU kind: a variant that lands on another host of the
same kind tonight continues its series; with a baseline plan, on the kind's scale."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from specsweep.analysis.baselines import OWN, REFERENCE, HostRole, plan_row
from specsweep.analysis.regression import judge_run
from tests.synthetic_levels import SPEC, T0, sweep_rows

FACTS = {"gpu_name": "NVIDIA H200", "gpu_count": 1}


def _night(n: int, spec_host: str, spec_speed: float = 1.0) -> list[dict]:
    """The baseline on gpu-a; SPEC (and its host's own baseline) on `spec_host`."""
    day = T0 + timedelta(days=n)
    base = sweep_rows(f"n{n}", started_at=day, target="gpu-a", sweep_kind="fleet_sweep")
    rows = [r for r in base if r["variant"] == "baseline"]
    for r in sweep_rows(f"n{n}", started_at=day, target=spec_host, sweep_kind="fleet_sweep"):
        if spec_host != "gpu-a" or r["variant"] != "baseline":
            r["output_throughput"] *= spec_speed
            rows.append(r)
    return rows


def test_a_variant_on_another_host_of_the_kind_is_not_new():
    rows = pd.DataFrame([r for n in range(4) for r in _night(n, "gpu-a")] + _night(5, "gpu-b"))
    report = judge_run(rows, "n5")
    spec = report.verdicts[report.verdicts["variant"] == SPEC]
    assert not spec.empty and "new" not in set(spec["verdict"])
    assert set(spec["target"]) == {"1x NVIDIA H200"}
    assert report.regressions.empty


def test_a_slow_host_of_the_kind_is_judged_on_the_kinds_scale():
    """gpu-b is 20% slower: against its own baseline (the plan) SPEC did not regress."""
    rows = pd.DataFrame(
        [r for n in range(4) for r in _night(n, "gpu-a")] + _night(5, "gpu-b", spec_speed=0.8)
    )
    raw = judge_run(rows, "n5")  # without the plan: the host's speed reads as a regression
    assert SPEC in set(raw.regressions["variant"])
    plans = pd.DataFrame(
        [
            plan_row("n5", "gpu-a", "per_gpu_kind", HostRole(REFERENCE, "gpu-a"), 0, FACTS),
            plan_row("n5", "gpu-b", "per_gpu_kind", HostRole(OWN, "gpu-b"), 1, FACTS),
        ]
    )
    judged = judge_run(rows, "n5", host_plans={"n5": plans})
    assert judged.regressions.empty, judged.regressions
