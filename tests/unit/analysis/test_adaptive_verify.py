"""Verification of adaptive variants against the per-level best, on synthetic levels.

The static curves are those of test_adaptive_export (3 steps best at c=1..8, 1 step at
c=16, no speculation from c=32); the tiers {1: [3], 12: [1], 20: [0]} are their export.
Each test sets the adaptive variant's throughput and step shares per level.
"""

from __future__ import annotations

import math

import pytest

from specsweep.analysis.adaptive_verify import default_tiers_reference, verify_adaptive
from tests.synthetic_levels import (
    adaptive_frame,
    adaptive_row,
    baseline_tput,
    chain_row,
    frame,
    static_rows,
    sweep_rows,
)

RUN = "20261201T000000Z-abcdef"
NAME = "eagle3-adaptive-bdc4b1"
TIERS = {1: [3], 12: [1], 20: [0]}
R3 = {1: 1.6, 2: 1.5, 4: 1.35, 8: 1.2, 16: 1.0, 32: 0.8, 64: 0.7}
R1 = {1: 1.3, 2: 1.28, 4: 1.22, 8: 1.14, 16: 1.05, 32: 0.9, 64: 0.8}
INTENDED = {1: 3, 2: 3, 4: 3, 8: 3, 16: 1, 32: 0, 64: 0}


def best(c: int) -> float:
    return baseline_tput(c) * max(R3[c], R1[c], 1.0)


def run(factor=None, shares=None, tiers=TIERS, default=None, row_kw=None, **kw):
    """The static run plus NAME: throughput factor x the best static at c (default 0.99 on
    speculative tiers, 0.96 x the baseline on [0]), step shares (default: as intended)."""
    factor, shares, row_kw = factor or {}, shares or {}, row_kw or {}
    rows = static_rows(RUN, {3: R3, 1: R1}, **row_kw)
    for c, steps in INTENDED.items():
        t = best(c) * factor.get(c, 0.99 if steps else 0.96)
        share = shares.get(c, {steps: 1.0})
        rows.append(adaptive_row(RUN, NAME, c, t, tiers=tiers, steps_share=share, **row_kw))
        if default is not None:
            rows.append(
                adaptive_row(RUN, "eagle3-adaptive-default", c, best(c) * default, tiers=None)
            )
    return verify_adaptive(adaptive_frame(rows), **kw)


def level(v, c):
    return v.levels.set_index("concurrency").loc[c]


def test_a_variant_matching_the_per_level_best_delivers():
    (v,) = run(default=0.95)
    assert v.variant == NAME and v.tiers == TIERS and v.delivers and v.verdict == "delivers"
    assert v.headline() == (
        f"{NAME} delivers: 0.99-1.00 of the best tier config at every level (c=1..64)"
    )
    table = v.levels.set_index("concurrency")
    assert dict(table["tier_key"]) == {1: 1, 2: 1, 4: 1, 8: 1, 16: 12, 32: 20, 64: 20}
    assert table.at[16, "best_chain_variant"] == "eagle3-s1-k1-d2"
    assert table.at[16, "reachable_throughput"] == pytest.approx(baseline_tput(16) * 1.05)
    assert table.at[32, "best_static_variant"] == "baseline"
    assert table.at[32, "reachable_source"].startswith("itself")
    assert table.at[32, "share_of_best_static"] == pytest.approx(0.96)
    assert table.at[32, "share_of_baseline"] == pytest.approx(0.96)
    assert table.at[1, "share_of_default"] == pytest.approx(0.99 / 0.95)
    assert table.at[32, "share_of_default"] == pytest.approx(0.96 / 0.95)
    assert table.at[1, "share_of_baseline"] == pytest.approx(0.99 * 1.6)
    assert table["cause"].isna().all()
    assert v.overhead == (
        "turning speculation off in the engine costs 4.0% at c>=32 against a server without "
        "speculation; if your load stays at or above c=32, run without it"
    )
    lines = v.describe()
    assert lines[0] == v.headline() and lines[1] == "tiers 1:[3] 12:[1] 20:[0] (max_bs 256)"
    assert any(ln.startswith("c=16: ") and "ran steps 1 for 100% - ok" in ln for ln in lines)


def test_the_default_tier_variant_is_a_reference_not_verified():
    rows = static_rows(RUN, {3: R3, 1: R1})
    rows += [adaptive_row(RUN, "eagle3-adaptive-default", c, best(c) * 0.9, tiers=None)
             for c in R3]  # fmt: skip
    df = adaptive_frame(rows)
    assert verify_adaptive(df) == []
    ref = default_tiers_reference(df).set_index("concurrency")
    assert dict(ref["tier_key"]) == {1: 1, 2: 1, 4: 1, 8: 8, 16: 8, 32: 32, 64: 64}
    assert ref.at[16, "candidate_steps"] == [0, 1, 3]
    assert ref.at[32, "share_of_best_static"] == pytest.approx(0.9)
    assert ref.at[32, "share_of_best_chain"] == pytest.approx(0.9 / 0.9)
    assert ref["steps_share"].isna().all()


def test_a_level_off_its_intended_tier_falls_short_with_cause_a():
    (v,) = run(factor={32: 0.85}, shares={32: {1: 0.62, 0: 0.38}})
    assert not v.delivers and v.short == [32] and v.verdict == "falls short at c=32"
    row = level(v, 32)
    assert row["cause"] == "off_tier" and row["share_intended"] == pytest.approx(0.38)
    assert row["reachable_source"] == "the best static, baseline"
    assert row["reason"] == (
        "ran steps 1 for 62% of the time instead of 0: batch sizes between the measured "
        "levels were routed to the neighbouring tier"
    )  # key 20 is far from 32 (padded 32, previous size 30): no boundary remark
    assert v.headline().startswith(f"{NAME} falls short at c=32 (0.85): ran steps 1 for 62%")
    # c=32 ran off its tier, so only c=64 measures the cost of steps 0.
    assert "costs 4.0% at c=64 against" in v.overhead


@pytest.mark.parametrize(("key", "close"), [(16, True), (14, True), (12, False)])
def test_a_tier_key_within_one_graph_size_of_the_level_is_named(key, close):
    tiers = {1: [3], key: [1], 20: [0]}
    (v,) = run(tiers=tiers, factor={16: 0.9}, shares={16: {1: 0.6, 3: 0.4}})
    row = level(v, 16)
    assert row["tier_key"] == key and row["cause"] == "off_tier"
    assert ("ran steps 3 for 40% of the time instead of 1" in row["reason"]) is True
    assert (f"a tier boundary (key {key}) too close to this level" in row["reason"]) is close


def test_a_multi_candidate_tier_still_probing_is_cause_b():
    tiers = {1: [1, 3], 12: [1], 20: [0]}
    (v,) = run(tiers=tiers, factor={1: 0.9}, shares={1: {3: 0.55, 1: 0.45}})
    row = level(v, 1)
    assert list(row["intended_steps"]) == [1, 3] and row["share_intended"] == pytest.approx(1)
    assert row["cause"] == "probing"
    assert row["reason"] == "the EMA was still probing (ran steps 3 for 55% and 1 for 45%)"
    assert v.short == [1]


def test_as_intended_but_short_is_cause_c_with_the_repeats_noise():
    (v,) = run(factor={2: 0.93}, row_kw={"repeats": 3, "cv": 0.01})
    row = level(v, 2)
    assert row["cause"] == "as_intended"
    assert row["noise"] == pytest.approx(2 * math.hypot(0.01, 0.01))
    assert row["reason"] == (
        "ran as intended; the gap is the adaptive runtime's own cost or noise "
        "(±2.8% from the repeats)"
    )
    (once,) = run(factor={2: 0.93})
    assert level(once, 2)["reason"].endswith("own cost or noise")  # no repeats: no spread


def test_tolerance_decides_short():
    assert run(factor={2: 0.975})[0].delivers
    assert not run(factor={2: 0.975}, tolerance=0.02)[0].delivers


def test_a_negligible_steps0_cost_says_so():
    (v,) = run(factor={32: 0.995, 64: 0.997})
    assert v.delivers
    assert v.overhead == (
        "turning speculation off in the engine costs 0.4% at c>=32 against a server without "
        "speculation (+0.3% to +0.5%): negligible"
    )


def test_missing_step_traces_are_said_and_not_guessed():
    rows = static_rows(RUN, {3: R3, 1: R1})
    for c, steps in INTENDED.items():
        t = best(c) * (0.99 if steps else 0.96) * (0.9 if c == 4 else 1)
        rows.append(adaptive_row(RUN, NAME, c, t, tiers=TIERS, steps_share=None))
    (v,) = verify_adaptive(adaptive_frame(rows))
    assert v.short == [4, 32, 64]
    assert set(v.levels.loc[~v.levels["ok"], "cause"]) == {"no_trace"}
    assert level(v, 4)["reason"].startswith("step trace unavailable")
    # Tier [0] without a trace: compared with the best static, its cost not attributed.
    assert level(v, 32)["reachable_source"] == "the best static, baseline"
    assert v.overhead is None
    assert any("c=32: tier [0] without a step trace" in n for n in v.notes)
    assert math.isnan(level(v, 4)["share_intended"])
    assert any("no step trace" in ln for ln in v.describe())


def test_runs_without_adaptive_variants_or_columns_verify_nothing():
    assert verify_adaptive(frame(sweep_rows(RUN))) == []
    old = frame(sweep_rows(RUN)).drop(columns=["adaptive", "adaptive_config"], errors="ignore")
    assert verify_adaptive(old) == []


def test_with_the_engines_steps_0_measured_it_is_the_reference_and_not_verified():
    """A pinned-0 variant (every tier [0]) measures what a tier [0] runs. At c=32 the engine's
    steps 0 (0.83 of the baseline) loses to 1 step (0.90): a tier config can reach the chain
    there, so an export running [0] at c=32 falls short of it; at c=64 (1 step 0.80) steps 0
    is the reachable best and the export, running it, delivers."""
    rows = static_rows(RUN, {3: R3, 1: R1})
    for c, steps in INTENDED.items():
        t = best(c) * 0.99 if steps else baseline_tput(c) * 0.83
        rows.append(adaptive_row(RUN, NAME, c, t, tiers=TIERS, steps_share={steps: 1.0}))
        rows.append(adaptive_row(RUN, "eagle3-adaptive-steps0", c, baseline_tput(c) * 0.83,
                                 tiers={1: [0]}, steps_share={0: 1.0}))  # fmt: skip
    (v,) = verify_adaptive(adaptive_frame(rows))  # the pinned-0 variant is not verified
    assert v.variant == NAME and v.short == [32]
    c32, c64 = level(v, 32), level(v, 64)
    assert c32["reachable_source"] == "the best chain, eagle3-s1-k1-d2"
    assert c32["share_of_reachable"] == pytest.approx(0.83 / 0.9)
    assert c64["reachable_source"] == "steps 0 in the engine, eagle3-adaptive-steps0"
    assert c64["share_of_reachable"] == pytest.approx(1.0) and c64["ok"]


def test_a_gap_inside_the_repeats_noise_is_not_a_shortfall():
    quiet = run(factor={8: 0.96}, row_kw={"repeats": 3, "cv": 0.002})
    noisy = run(factor={8: 0.96}, row_kw={"repeats": 3, "cv": 0.02})  # 2 sigma ≈ 5.7%
    assert quiet[0].short == [8]  # 4% below with ±0.6%: short
    assert noisy[0].short == [] and level(noisy[0], 8)["noise"] > 0.04


def test_a_reference_measured_once_beside_repeated_ones_has_no_noise_of_its_own():
    """Measuring more pools passes into some levels only: the 1-step chain and the
    baseline here have 3 passes, the 3-step chain (the best chain at c=1..8) one, so its
    CV is unknown at every level. The verification then judges against it with the
    tolerance alone, as where nothing was repeated (it raised KeyError: the CV table had
    no column for it; the adaptive flow's test met it once measuring more was on)."""
    rows = static_rows(RUN, {1: R1}, repeats=3, cv=0.01)
    rows += [chain_row(RUN, 3, c, baseline_tput(c) * r) for c, r in R3.items()]
    for c, steps in INTENDED.items():
        t = best(c) * (0.99 if steps else 0.96)
        rows.append(adaptive_row(RUN, NAME, c, t, tiers=TIERS, steps_share={steps: 1.0},
                                 repeats=3, cv=0.01))  # fmt: skip
    (v,) = verify_adaptive(adaptive_frame(rows))
    one = level(v, 1)
    assert one["reachable_source"] == "the best chain, eagle3-s3-k1-d4"
    assert math.isnan(one["noise"])  # the tolerance alone, as where nothing was repeated
    assert v.delivers
