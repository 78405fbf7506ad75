"""A fleet's baselines: the plan, the calibration verdict, and answers within a host or kind."""

from __future__ import annotations

import math

import pytest

from specsweep.analysis.answer import analyze_run
from specsweep.analysis.baselines import (
    CALIBRATED,
    OWN,
    REFERENCE,
    HostRole,
    calibrate,
    initial_plan,
    plan_row,
)
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import LEVELS, SPEC, baseline_tput, level_row

H200, A100 = "1x NVIDIA H200", "1x NVIDIA A100"
SHAPE = "in128-out64"
SLOW = 0.8  # gpu-b runs every step at 80% of gpu-a's speed


def ratio(c: int) -> float:
    return 1.45 - 0.1 * math.log2(c)  # crosses 1 near c = 22.6


def test_per_gpu_kind_plans_one_reference_per_kind_and_calibrates_the_others():
    kinds = {"a": H200, "b": H200, "c": A100, "d": None}
    plan = initial_plan("per_gpu_kind", ["a", "b", "c", "d"], kinds)
    assert plan == {
        "a": HostRole(REFERENCE, "a"),
        "b": HostRole(CALIBRATED, "a"),
        "c": HostRole(REFERENCE, "c"),
        "d": HostRole(OWN, "d"),  # unknown kind: nothing to calibrate against
    }
    every = initial_plan("every_host", ["a", "b", "c", "d"], kinds)
    assert [every[h].role for h in "abcd"] == [REFERENCE, OWN, REFERENCE, OWN]
    assert initial_plan("once", ["a", "b"], kinds) == {}


def _store(tmp_path, rows) -> ResultsStore:
    store = ResultsStore(tmp_path / "results")
    for row in rows:
        store.write_level(row)
    return store


def _baseline(run, target, c, speed=1.0, spread=0.01):
    t = baseline_tput(c) * speed
    return level_row(
        run, "baseline", c, t, target=target,
        output_throughput_lo=t * (1 - spread), output_throughput_hi=t * (1 + spread),
    )  # fmt: skip


def test_calibration_passes_within_tolerance_and_fails_a_slow_host(tmp_path):
    rows = [_baseline("r", "a", 2), _baseline("r", "b", 2, SLOW), _baseline("r", "c", 2, 1.004)]
    levels = _store(tmp_path, rows).read_levels("r")
    slow = calibrate(levels, "b", "a", 2, SHAPE, 0.02)
    assert slow["passed"] is False and slow["calibration_ratio"] == pytest.approx(SLOW)
    assert slow["calibration_lo"] < SLOW < slow["calibration_hi"]
    assert "-20.0%" in slow["note"] and "own baseline" in slow["note"]
    close = calibrate(levels, "c", "a", 2, SHAPE, 0.02)
    assert close["passed"] is True and close["calibration_ratio"] == pytest.approx(1.004)
    pending = calibrate(levels, "b", "a", 4, SHAPE, 0.02)  # no level at c=4 yet
    assert pending["passed"] is None and "no ok baseline" in pending["note"]


def _fleet_rows(run: str) -> list[dict]:
    """gpu-a (fast) measures the baseline and half the variants' levels' worth; gpu-b is
    20% slower and measures SPEC with its own baseline."""
    rows = [_baseline(run, "gpu-a", c) for c in LEVELS]
    rows += [_baseline(run, "gpu-b", c, SLOW) for c in LEVELS]
    for c in LEVELS:
        t = baseline_tput(c) * ratio(c) * SLOW
        lo, hi = t * 0.99, t * 1.01
        rows.append(
            level_row(
                run, SPEC, c, t, target="gpu-b", output_throughput_lo=lo, output_throughput_hi=hi
            )
        )
    return rows


def _plans(store: ResultsStore, run: str, b_role: HostRole, kind_b: str = H200) -> None:
    facts = {"gpu_name": "NVIDIA H200", "gpu_count": 1}
    store.write_host_plan(
        plan_row(run, "gpu-a", "per_gpu_kind", HostRole(REFERENCE, "gpu-a"), 0, facts)
    )
    facts_b = {"gpu_name": kind_b.removeprefix("1x "), "gpu_count": 1}
    store.write_host_plan(plan_row(run, "gpu-b", "per_gpu_kind", b_role, 1, facts_b))


def test_a_slow_hosts_variant_is_compared_with_its_own_baseline(tmp_path):
    store = _store(tmp_path, _fleet_rows("r"))
    # Without a plan (fleet.baseline once) SPEC on the slow host is divided by the fast
    # host's baseline: every speedup is 20% low and the pivot moves.
    once = analyze_run(store, "r")
    assert once.first.best.set_index("concurrency").loc[1, "speedup"] == pytest.approx(1.45 * SLOW)
    _plans(store, "r", HostRole(OWN, "gpu-b"))
    answer = analyze_run(store, "r")
    best = answer.first.best.set_index("concurrency")
    for c in LEVELS:
        expected = max(ratio(c), 1.0)
        assert best.loc[c, "speedup"] == pytest.approx(expected), c
    assert answer.first.pivots[SPEC].concurrency == pytest.approx(2**4.5, rel=0.02)
    assert answer.first.gpu_kind == H200 and answer.first.gpu_kind_warning is None
    # the rescaled level carries both of its host's sides, so it is wider than either
    levels = answer.first.levels
    row = levels[(levels["variant"] == SPEC) & (levels["concurrency"] == 4)]
    lo, hi = row[["output_throughput_lo", "output_throughput_hi"]].iloc[0]
    assert (hi - lo) / 2 / row["output_throughput"].iloc[0] > 0.0125
    assert set(answer.first.levels["baseline_target"]) == {"gpu-a", "gpu-b"}


def test_a_calibrated_host_that_passed_uses_the_references_baseline(tmp_path):
    store = _store(tmp_path, _fleet_rows("r"))
    _plans(store, "r", HostRole(CALIBRATED, "gpu-a"))
    # As if its calibration had passed (a slow host cannot: see the test above): then its
    # variants are divided by the reference's baseline, and only then.
    row = plan_row("r", "gpu-b", "per_gpu_kind", HostRole(CALIBRATED, "gpu-a"), 1,
                   {"gpu_name": "NVIDIA H200", "gpu_count": 1}, passed=True)  # fmt: skip
    store.write_host_plan(row)
    answer = analyze_run(store, "r")
    assert answer.first.best.set_index("concurrency").loc[1, "speedup"] == pytest.approx(
        1.45 * SLOW
    )
    assert set(answer.first.levels["baseline_target"]) == {"gpu-a"}


def test_gpu_kinds_are_answered_apart(tmp_path):
    store = _store(tmp_path, _fleet_rows("r"))
    _plans(store, "r", HostRole(REFERENCE, "gpu-b"), kind_b="NVIDIA A100")
    answer = analyze_run(store, "r")
    assert answer.gpu_kinds == [H200, A100]
    assert set(answer.first.levels["variant"]) == {"baseline"}  # H200: no variant measured there
    other = answer.cell(gpu_kind=A100)
    assert set(other.levels["target"]) == {"gpu-b"}
    assert other.best.set_index("concurrency").loc[1, "speedup"] == pytest.approx(1.45)


def test_the_run_summary_follows_the_plan_too(tmp_path):
    from specsweep.analysis.summary import summarize

    store = _store(tmp_path, _fleet_rows("r"))
    levels = store.read_levels("r")
    assert summarize(levels).best.set_index("concurrency").loc[1, "speedup"] == pytest.approx(
        1.45 * SLOW
    )
    _plans(store, "r", HostRole(OWN, "gpu-b"))
    summary = summarize(levels, host_plans=store.read_host_plans("r"))
    assert summary.best.set_index("concurrency").loc[1, "speedup"] == pytest.approx(1.45)
