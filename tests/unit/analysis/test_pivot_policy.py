"""Best per level, pivot points and the speculation policy on curves with known answers."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from specsweep.analysis import (
    LatencySLO,
    TrafficMix,
    analyze,
    best_per_level,
    latency_table,
    pivot_points,
    speculation_policy,
)
from specsweep.analysis.pivot import pivot_for
from tests.synthetic_levels import LEVELS, SPEC, baseline_tput, frame, level_row, sweep_rows


def ratio(c: int) -> float:
    return 1.45 - 0.1 * math.log2(c)


def test_pivot_is_interpolated_on_log2_concurrency():
    pivot = pivot_points(frame(sweep_rows("r")))[SPEC]
    assert pivot.kind == "crosses"
    # r is linear in log2 c and crosses 1 at log2 c = 4.5, between the measured 16 and 32.
    assert pivot.concurrency == pytest.approx(2**4.5)
    assert pivot.levels == tuple(LEVELS)
    assert not pivot.multiple_crossings
    assert "22.6" in pivot.describe()


@pytest.mark.parametrize(
    ("ratios", "kind", "text"),
    [
        ([1.3, 1.2, 1.1, 1.05, 1.01, 1.0], "never", "never"),
        ([0.9, 0.8, 0.7, 0.7, 0.6, 0.5], "always", "always"),
        ([0.9, 0.95, 1.1, 1.2, 1.2, 1.3], "below_at_low", "faster from c≈2.52"),
    ],
)
def test_pivot_without_a_downward_crossing(ratios, kind, text):
    pivot = pivot_for(dict_series(ratios), SPEC)
    assert pivot.kind == kind
    assert pivot.concurrency is None
    assert text in pivot.describe()


def test_multiple_crossings_pivot_is_the_first_downward_one():
    # Wins at 1, loses at 2, wins again at 4, loses from 8 on.
    pivot = pivot_for(dict_series([1.2, 0.95, 1.05, 0.9, 0.8, 0.7]), SPEC)
    assert pivot.kind == "crosses"
    assert pivot.concurrency == pytest.approx(2 ** (0.2 / 0.25))  # between 1 and 2
    assert [d for _, d in pivot.crossings] == ["down", "up", "down"]
    assert pivot.multiple_crossings
    assert "3 times" in pivot.describe()


def dict_series(ratios: list[float]):
    import pandas as pd

    return pd.Series(ratios, index=LEVELS[: len(ratios)])


def test_best_per_level_with_speedup_and_spread_from_repeats():
    rows = sweep_rows("r", repeats=3, cv=0.03)
    best = best_per_level(frame(rows)).set_index("concurrency")
    assert list(best.loc[[1, 16], "best_variant"]) == [SPEC, SPEC]
    assert list(best.loc[[32], "best_variant"]) == ["baseline"]
    assert best.at[1, "speedup"] == pytest.approx(1.45)
    assert best.at[1, "speedup_spread"] == pytest.approx(math.hypot(0.03, 0.03))
    assert best.at[32, "speedup"] == 1.0
    assert best.at[32, "speedup_spread"] == 0.0  # the baseline compared with itself


def test_best_per_level_without_repeats_has_no_spread():
    best = best_per_level(frame(sweep_rows("r")))
    assert best["speedup_spread"].loc[best["best_variant"] != "baseline"].isna().all()


def test_failed_levels_do_not_compete():
    rows = sweep_rows("r")
    rows[1] = level_row("r", SPEC, 1, 1e9, status="failed")  # absurd number, but failed
    best = best_per_level(frame(rows)).set_index("concurrency")
    assert best.at[1, "best_variant"] == "baseline"


def test_policy_uniform_mix_matches_hand_computation():
    policy = speculation_policy(frame(sweep_rows("r")))
    assert (policy.variant, policy.up_to, policy.next_level) == (SPEC, 16, 32)
    base = sum(baseline_tput(c) for c in LEVELS) / len(LEVELS)
    mixed = sum(baseline_tput(c) * (ratio(c) if c <= 16 else 1.0) for c in LEVELS) / len(LEVELS)
    always = sum(baseline_tput(c) * ratio(c) for c in LEVELS) / len(LEVELS)
    assert policy.throughput == pytest.approx(mixed)
    assert policy.gain_vs_baseline == pytest.approx(mixed / base - 1)
    assert policy.best_single == SPEC
    assert policy.gain_vs_best_single == pytest.approx(mixed / always - 1)
    assert policy.oracle_throughput == pytest.approx(mixed)  # one variant: the rule is optimal
    line = policy.line()
    assert line.startswith(f"Use {SPEC} up to concurrency 16, then no speculation from c=32")
    assert "crosses the baseline's at c≈22.6" in line
    assert f"{mixed / base - 1:+.1%} output throughput vs always-baseline" in line


def test_the_traffic_mix_weighs_the_rule_but_never_drops_a_levels_clear_gain():
    high = TrafficMix(weights={16: 1, 32: 1})
    policy = speculation_policy(frame(sweep_rows("r")), high)
    assert (policy.variant, policy.up_to) == (SPEC, 16)  # c=16 gains 5%: 2.5% over the mix
    assert policy.tie_note is None
    # At a tenth of the time c=16's 5% is 0.3% of the mix's throughput; it is still a clear
    # gain at c=16 (issue 27: one tie rule, judged per level), so the rule keeps it, and the
    # mix only weighs what the rule is worth.
    heavy_high = speculation_policy(frame(sweep_rows("r")), TrafficMix(weights={16: 1, 32: 9}))
    assert (heavy_high.variant, heavy_high.up_to) == (SPEC, 16)
    assert 0.0 < heavy_high.gain_vs_baseline < 0.01
    only_high = speculation_policy(frame(sweep_rows("r")), TrafficMix(weights={32: 1}))
    assert (only_high.variant, only_high.up_to) == (SPEC, 16)
    assert only_high.gain_vs_baseline == 0.0  # no traffic where it speculates
    slower = speculation_policy(frame(sweep_rows("r", ratio=dict.fromkeys(LEVELS, 0.9))))
    assert slower.variant is None
    assert slower.rule() == "no speculation at any measured concurrency"


def test_policy_with_several_crossings_scores_the_mix_not_the_first_crossing():
    ratios = dict(zip(LEVELS, [1.2, 0.95, 1.3, 0.9, 0.8, 0.7], strict=True))
    low = TrafficMix(weights={1: 1, 2: 1, 4: 1, 8: 1})
    policy = speculation_policy(frame(sweep_rows("r", ratio=ratios)), low)
    # Gains at c=1 (+100 tok/s) and c=4 (+455) outweigh the loss at c=2 (-43.5), and beat
    # stopping after c=1 by 6.4%, beyond the 1% tie margin.
    assert (policy.variant, policy.up_to, policy.next_level) == (SPEC, 4, 8)
    assert "crosses the baseline's at c≈6.73" in policy.rule()  # the crossing it switches at


def test_traffic_mix_validation():
    with pytest.raises(ValidationError):
        TrafficMix(weights={1: -1.0})
    with pytest.raises(ValidationError):
        TrafficMix(weights={1: 0.0})
    with pytest.raises(ValidationError):
        TrafficMix(weights={1: 1.0}, uniform=True)  # unknown key
    with pytest.raises(ValueError, match=r"\[3\]"):
        TrafficMix(weights={3: 1.0}).resolve(LEVELS)


def test_slo_limits_variants_to_the_levels_where_they_meet_it():
    rows = [
        level_row(
            "r",
            r["variant"],
            r["concurrency"],
            r["output_throughput"],
            itl_p99=50.0 if r["variant"] == SPEC and r["concurrency"] >= 4 else 5.0,
        )
        for r in sweep_rows("r")
    ]
    levels = frame(rows)
    slo = LatencySLO(itl_p99_ms=10)
    policy = speculation_policy(levels, slo=slo)
    assert (policy.variant, policy.up_to) == (SPEC, 2)
    assert policy.best_single is None  # SPEC misses the SLO at levels that carry traffic
    best = best_per_level(levels, slo).set_index("concurrency")
    assert best.at[4, "best_variant"] == SPEC
    assert best.at[4, "best_variant_slo"] == "baseline"
    assert best.at[2, "best_variant_slo"] == SPEC
    lat = latency_table(levels, slo)
    assert (
        lat.loc[(lat["variant"] == SPEC) & (lat["concurrency"] == 8), "meets_slo"].item() is False
    )
    assert "ITL p99 <= 10 ms" in policy.line()


def test_slo_that_nothing_meets_names_the_baseline_misses():
    levels = frame(sweep_rows("r", ttft_p99=100.0))
    best = best_per_level(levels, LatencySLO(ttft_p99_ms=50)).set_index("concurrency")
    assert best["best_variant_slo"].isna().all()
    policy = speculation_policy(levels, slo=LatencySLO(ttft_p99_ms=50))
    assert policy.variant is None
    assert "even the baseline misses it at c=1, 2, 4, 8, 16, 32" in policy.line()


def test_no_baseline_means_no_pivot_and_no_policy():
    rows = [r for r in sweep_rows("r") if r["variant"] != "baseline"]
    answer = analyze(frame(rows), "r")
    assert answer.first.pivots == {}
    assert answer.first.policy is None


def test_an_adaptive_server_is_not_offered_as_the_policys_variant():
    """Measured faster than every static variant at low concurrency, it still is not X in
    'use X up to N': it is the engine's own policy, judged by the verification."""
    from specsweep.analysis.policy import speculation_policy
    from tests.synthetic_levels import adaptive_frame, adaptive_row, static_rows

    rows = static_rows("r", {2: {1: 1.4, 8: 1.2, 32: 0.8}})
    rows += [
        adaptive_row("r", "eagle3-adaptive-x", c, baseline_tput(c) * r, tiers={1: [2], 24: [0]})
        for c, r in ((1, 1.6), (8, 1.5), (32, 1.05))
    ]
    policy = speculation_policy(adaptive_frame(rows))
    assert policy is not None and policy.variant == "eagle3-s2-k1-d3"
    assert "eagle3-adaptive-x" not in set(policy.candidates["variant"].dropna())
    assert policy.best_single == "eagle3-s2-k1-d3"
