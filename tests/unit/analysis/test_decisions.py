"""Decision verdicts on synthetic nights: the best per level, a pivot, the policy moved
beyond their intervals (reported), or inside them (not)."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest

from specsweep.analysis.decisions import (
    CHANGED,
    SAME,
    UNSURE,
    WITHIN_NOISE,
    judge_decisions,
    judge_stored_decisions,
)
from specsweep.analysis.params import RegressionPolicy
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import (
    LEVELS,
    SPEC,
    adaptive_row,
    baseline_tput,
    frame,
    level_row,
    night,
    sweep_rows,
    write,
)

ADAPTIVE = "eagle3-adaptive-default"


def with_ci(rows: list[dict], rel: float) -> list[dict]:
    """A symmetric 95% interval of +-rel on every row's output throughput (schema 3)."""
    for r in rows:
        r["output_throughput_lo"] = r["output_throughput"] * (1 - rel)
        r["output_throughput_hi"] = r["output_throughput"] * (1 + rel)
    return rows


def adaptive_night(i: int, adaptive_c8: float, rel: float, version: str = "0.5.11") -> list:
    """Baseline, SPEC at 1.4x (c=1) / 1.2x (c=8) and sglang's default adaptive server at
    1.1x (c=1) / adaptive_c8 x the baseline (c=8), every level measured +-rel."""
    run_id, start = night(i)
    kw = {"started_at": start, "sglang_version": version}
    rows = []
    for c, spec, adaptive in ((1, 1.4, 1.1), (8, 1.2, adaptive_c8)):
        base = baseline_tput(c)
        rows += [
            level_row(run_id, "baseline", c, base, **kw),
            level_row(run_id, SPEC, c, base * spec, **kw),
            adaptive_row(run_id, ADAPTIVE, c, base * adaptive, tiers=None, **kw),
        ]
    return with_ci(rows, rel)


def pivot_nights(tonight_shift: float, rel: float = 0.01, n: int = 3) -> tuple[str, list]:
    """n nights of sweep_rows (SPEC crosses at c≈22.6), then tonight with SPEC's ratio
    lowered by `tonight_shift` (0.1 moves the crossing to c≈11.3)."""
    rows = []
    for i in range(n):
        run_id, start = night(i)
        rows += with_ci(sweep_rows(run_id, started_at=start), rel)
    run_id, start = night(n)
    ratio = {c: 1.45 - tonight_shift - 0.1 * math.log2(c) for c in LEVELS}
    rows += with_ci(sweep_rows(run_id, ratio, started_at=start), rel)
    return run_id, rows


def one(report, kind: str, subject: str):
    (d,) = [d for d in report.decisions if d.kind == kind and d.subject == subject]
    return d


def test_a_new_default_that_flips_the_best_at_c8_beyond_noise_is_reported():
    history = [r for i in range(3) for r in adaptive_night(i, 1.1, 0.01, version="0.5.10")]
    tonight = adaptive_night(3, 1.35, 0.01)  # the upgrade's new default tiers win at c=8
    run_id = night(3)[0]
    report = judge_decisions(frame(history + tonight), run_id)
    assert report.moved
    best = one(report, "best", "c=8")
    assert (best.before, best.after, best.status) == (SPEC, ADAPTIVE, CHANGED)
    assert best.previous_run_id == night(2)[0]
    assert best.numbers["lead"] == pytest.approx(1.35 / 1.2)
    assert best.numbers["lead_lo"] > 1.01
    assert one(report, "best", "c=1").status == SAME
    assert "best" in report.event_payload()["kinds"]
    sentence = best.describe()
    assert f"best at c=8 (gpu-host) is now {ADAPTIVE}, was {SPEC}" in sentence
    assert f"leads {SPEC} 1.125x (95%: " in sentence and "beyond the 1% tie margin" in sentence
    assert report.environment["sglang_version"] == ("0.5.10", "0.5.11")
    assert "sglang_version: 0.5.10 -> 0.5.11" in report.message()
    markdown = report.markdown()
    assert f"| best | c=8 | {SPEC} | {ADAPTIVE} |" in markdown
    json.dumps(report.event_payload())  # JSON-ready for the event


def test_the_same_flip_inside_the_intervals_is_not_a_change():
    # 1.3x vs 1.2x, each level +-6%: the lead's interval reaches below 1 + 1%.
    history = [r for i in range(3) for r in adaptive_night(i, 1.1, 0.06)]
    report = judge_decisions(frame(history + adaptive_night(3, 1.3, 0.06)), night(3)[0])
    best = one(report, "best", "c=8")
    assert (best.before, best.after, best.status) == (SPEC, ADAPTIVE, WITHIN_NOISE)
    assert best.numbers["lead_lo"] < 1.01 < best.numbers["lead"]
    assert best not in report.changed
    assert "near-tie" in best.describe()
    # a near-tie of the flip (1.21x vs 1.2x) with tight intervals is not one either
    quiet = [r for i in range(3) for r in adaptive_night(i, 1.1, 0.01)]
    narrow = judge_decisions(frame([*quiet, *adaptive_night(3, 1.21, 0.01)]), night(3)[0])
    assert one(narrow, "best", "c=8").status == WITHIN_NOISE


def test_a_pivot_that_moves_from_22_to_11_with_tight_intervals_is_reported():
    run_id, rows = pivot_nights(0.1)
    report = judge_decisions(frame(rows), run_id)
    pivot = one(report, "pivot", SPEC)
    assert pivot.status == CHANGED
    n = pivot.numbers
    assert n["pivot_before"] == pytest.approx(2**4.5)
    assert n["pivot_after"] == pytest.approx(2**3.5)
    assert n["high_after"] < n["low_before"]  # the 95% ranges do not overlap
    assert "moved down" in pivot.describe()
    assert pivot in report.changed


def test_a_pivot_whose_ranges_overlap_has_not_moved():
    run_id, rows = pivot_nights(0.025)  # c≈22.6 -> c≈19.0, ranges ~20.5-24.9 and ~17.2-20.9
    report = judge_decisions(frame(rows), run_id)
    pivot = one(report, "pivot", SPEC)
    assert pivot.status == WITHIN_NOISE
    assert pivot.numbers["high_after"] > pivot.numbers["low_before"]
    assert not [d for d in report.changed if d.kind == "pivot"]


def test_an_inconclusive_pivot_is_unsure_never_a_move():
    run_id, rows = pivot_nights(0.1, rel=0.05)  # +-5%: the ratio's interval holds 1 near c=11
    report = judge_decisions(frame(rows), run_id)
    pivot = one(report, "pivot", SPEC)
    assert pivot.status == UNSURE
    assert "crosses" in pivot.describe() and "contains 1" in pivot.describe()
    assert pivot.record() in report.event_payload()["unsure"]


def test_a_policy_change_is_reported_with_its_numbers():
    run_id, rows = pivot_nights(0.1)
    report = judge_decisions(frame(rows), run_id)
    policy = one(report, "policy", "policy")
    assert policy.status == CHANGED
    n = policy.numbers
    assert (n["variant_before"], n["variant_after"]) == (SPEC, SPEC)
    assert n["up_to_after"] < n["up_to_before"]
    assert n["gain_after_hi"] < n["gain_before_lo"]  # the gains' intervals separate
    assert policy.before.startswith(f"use {SPEC} up to concurrency {n['up_to_before']}")
    text = policy.describe()
    assert (
        "gain vs always-baseline" in text and "(95%: " in text and "the intervals separate" in text
    )
    payload = report.event_payload()
    assert {"policy", "pivot", "best"} <= set(payload["kinds"])
    (change,) = [c for c in payload["changes"] if c["kind"] == "policy"]
    assert change["numbers"]["gain_before_lo"] == pytest.approx(n["gain_before_lo"])


def test_speculation_that_stops_paying_changes_the_policys_variant():
    rows = []
    for i in range(3):
        run_id, start = night(i)
        rows += with_ci(sweep_rows(run_id, started_at=start), 0.01)
    run_id, start = night(3)
    rows += with_ci(sweep_rows(run_id, {c: 0.9 for c in LEVELS}, started_at=start), 0.01)
    policy = one(judge_decisions(frame(rows), run_id), "policy", "policy")
    assert policy.status == CHANGED
    assert policy.after == "no speculation at any measured concurrency"
    assert policy.numbers["gain_after"] == 0.0


def test_steady_nights_change_nothing():
    run_id, rows = pivot_nights(0.0)
    report = judge_decisions(frame(rows), run_id)
    assert not report.moved
    assert {d.status for d in report.decisions} == {SAME}
    assert "decisions unchanged" in report.headline()
    assert "No decision moved beyond its 95% interval" in report.markdown()
    assert report.event_payload()["changes"] == []


def test_levels_without_intervals_are_unsure_where_something_differs():
    rows = []
    for i in range(3):
        run_id, start = night(i)
        rows += sweep_rows(run_id, started_at=start)
    run_id, start = night(3)
    rows += sweep_rows(run_id, {c: 1.35 - 0.1 * math.log2(c) for c in LEVELS}, started_at=start)
    report = judge_decisions(frame(rows), run_id)
    assert not report.moved
    assert one(report, "best", "c=16").status == UNSURE
    assert one(report, "pivot", SPEC).status == UNSURE


def test_only_the_same_scope_within_the_window_is_history():
    # an ad-hoc run with other lengths, between the last night and tonight, is not a night
    run_id, rows = pivot_nights(0.1)
    adhoc = with_ci(sweep_rows("adhoc", started_at=night(2)[1] + timedelta(hours=12),
                               output_len=512), 0.01)  # fmt: skip
    rows += adhoc
    report = judge_decisions(frame(rows), run_id, RegressionPolicy(history_runs=2))
    assert report.previous_run_ids == (night(1)[0], night(2)[0])
    assert {d.previous_run_id for d in report.decisions} == {night(2)[0]}
    assert "adhoc" not in report.previous_run_ids
    first = judge_decisions(frame(rows), night(0)[0])
    assert first.decisions == () and not first.moved
    assert "no earlier run" in first.headline()


def test_judge_stored_decisions_reads_the_store(tmp_path):
    store = ResultsStore(tmp_path)
    run_id, rows = pivot_nights(0.1)
    write(store, rows)
    assert judge_stored_decisions(store, run_id).moved
    assert judge_stored_decisions(store, "not-measured").decisions == ()


def test_a_pivot_unsure_at_every_level_is_unsure_and_described():
    rows = []
    for i in range(2):
        run_id, start = night(i)
        rows += with_ci(sweep_rows(run_id, {1: 1.01, 2: 1.0}, [1, 2], started_at=start), 0.05)
    pivot = one(judge_decisions(frame(rows), run_id), "pivot", SPEC)
    assert pivot.status == UNSURE
    assert pivot.after.startswith("crosses over the whole measured range (c=1..2)")
