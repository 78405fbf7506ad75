"""Winners, pivots and policies with their 95% intervals, on curves of known spread."""

from __future__ import annotations

import math
from typing import Any

import pytest

from specsweep.analysis import best_per_level, pivot_points, speculation_policy
from specsweep.analysis.params import TrafficMix
from tests.synthetic_levels import (
    LEVELS,
    SPEC,
    baseline_tput,
    chain_row,
    frame,
    level_row,
    sweep_rows,
)


def with_ci(rows: list[dict[str, Any]], rel: float) -> list[dict[str, Any]]:
    """The rows with a symmetric ±rel interval around their throughput."""
    return [
        {
            **r,
            "output_throughput_lo": r["output_throughput"] * (1 - rel),
            "output_throughput_hi": r["output_throughput"] * (1 + rel),
        }
        for r in rows
    ]


def ratios(values: list[float]) -> dict[int, float]:
    return dict(zip(LEVELS, values, strict=True))


def test_a_sharp_pivot_gets_a_range_inside_its_bracket():
    pivot = pivot_points(frame(with_ci(sweep_rows("r"), 0.01)))[SPEC]
    assert pivot.kind == "crosses"
    assert pivot.concurrency == pytest.approx(2**4.5)
    # ratios 1.05 and 0.95 at c=16 and 32, each ±1.4% (two ±1% sides in quadrature)
    assert 16 < pivot.low < pivot.concurrency < pivot.high < 32
    assert pivot.low == pytest.approx(20.5, abs=0.3)
    assert pivot.high == pytest.approx(24.9, abs=0.3)
    assert not pivot.soft
    assert "(95%: c≈20.5 to 24.9)" in pivot.describe()


def test_wide_intervals_make_the_same_crossing_inconclusive_with_the_level_to_add():
    rows = with_ci(sweep_rows("r", ratio=ratios([1.3, 1.2, 1.1, 1.01, 0.99, 0.9])), 0.02)
    pivot = pivot_points(frame(rows))[SPEC]
    assert pivot.kind == "inconclusive"
    assert pivot.soft
    assert pivot.unsure == (8, 16)
    assert (pivot.low, pivot.high) == (4.0, 32.0)
    assert pivot.suggest == 11  # the middle of 8..16, where the ratio itself crosses 1
    text = pivot.describe()
    assert text.startswith("crosses between c=4 and c=32")
    assert "add a level at c=11" in text


def with_ratio_ci(values: list[float], rel: dict[int, float]) -> list[dict[str, Any]]:
    """SPEC's rows at these ratios, each level's two sides ±rel[c] (±1e-4 where unnamed)."""
    rows = sweep_rows("r", ratio=ratios(values))
    out = []
    for r in rows:
        half = rel.get(r["concurrency"], 1e-4)
        out.extend(with_ci([r], half))
    return out


def test_a_crossing_whose_far_level_is_level_with_the_baseline_is_placed():
    """At c=16 the ratio is 0.998 and its interval (±0.7%) holds 1 but lies within the 1%
    tie margin: whichever way it goes, speculation does not pay there, so the crossing
    between c=8 (sure above) and c=16 is placed, not left inconclusive."""
    values = [1.3, 1.2, 1.1, 1.05, 0.998, 0.9]
    pivot = pivot_points(frame(with_ratio_ci(values, {16: 0.005})))[SPEC]
    assert pivot.kind == "crosses" and pivot.level == (16,) and pivot.unsure == ()
    assert 8 < pivot.low < pivot.concurrency < pivot.high == 16
    assert pivot.describe().endswith("; level with the baseline within 1% at c=16")
    # the same ratios with the interval reaching 3% past 1 on either side: not placed
    wide = pivot_points(frame(with_ratio_ci(values, {16: 0.02})))[SPEC]
    assert (wide.kind, wide.unsure, wide.level) == ("inconclusive", (16,), ())


def test_a_far_level_that_can_gain_at_most_the_margin_places_the_crossing():
    """0.993 at c=16, its interval 0.983 to 1.003: it may lose more than the margin, but it
    cannot gain more, so speculation has stopped paying there. Gaining more than the margin
    is what keeps the crossing open (an upper bound of 1.017)."""
    settles = pivot_points(frame(with_ratio_ci([1.3, 1.2, 1.1, 1.05, 0.993, 0.9], {16: 0.007})))
    assert settles[SPEC].kind == "crosses" and settles[SPEC].high == 16
    assert settles[SPEC].unsure == (16,)  # its interval is not within the margin
    opens = pivot_points(frame(with_ratio_ci([1.3, 1.2, 1.1, 1.05, 0.993, 0.9], {16: 0.017})))
    assert opens[SPEC].kind == "inconclusive" and opens[SPEC].suggest == 11
    # and below the crossing: a near level that cannot lose more than the margin
    near_low = pivot_points(frame(with_ratio_ci([1.3, 1.2, 1.1, 1.004, 0.95, 0.9], {8: 0.004})))
    assert near_low[SPEC].kind == "crosses" and near_low[SPEC].low == 8
    assert near_low[SPEC].level == (8,)


def test_a_top_level_level_with_the_baseline_is_never_slower_not_inconclusive():
    values = [1.3, 1.25, 1.2, 1.15, 1.1, 1.003]  # at c=32: 0.997 to 1.009
    pivot = pivot_points(frame(with_ratio_ci(values, {32: 0.004})))[SPEC]
    assert (pivot.kind, pivot.level) == ("never", (32,))
    assert pivot.describe() == (
        "never: faster than the baseline at every measured level (c=1..32) or level with it; "
        "level with the baseline within 1% at c=32"
    )


def test_never_needs_every_level_sure():
    values = [1.3, 1.25, 1.2, 1.15, 1.1, 1.005]
    assert pivot_points(frame(sweep_rows("r", ratio=ratios(values))))[SPEC].kind == "never"
    sure = pivot_points(frame(with_ci(sweep_rows("r", ratio=ratios(values)), 0.001)))[SPEC]
    assert sure.kind == "never"
    pivot = pivot_points(frame(with_ci(sweep_rows("r", ratio=ratios(values)), 0.02)))[SPEC]
    assert pivot.kind == "inconclusive"
    assert (pivot.low, pivot.high, pivot.suggest) == (16.0, None, 64)
    assert "from c=16 up to the highest measured c=32" in pivot.describe()


def test_rows_without_intervals_keep_todays_pivot():
    pivot = pivot_points(frame(sweep_rows("r")))[SPEC]
    assert pivot.kind == "crosses"
    assert (pivot.low, pivot.high, pivot.intervals) == (None, None, False)


def two_chains(lead: float, rel: float) -> list[dict[str, Any]]:
    """At c=4: the baseline, a 2-step chain, and a 4-step chain `lead` times faster."""
    base = baseline_tput(4)
    rows = [
        level_row("r", "baseline", 4, base),
        chain_row("r", 2, 4, 1.3 * base),
        chain_row("r", 4, 4, 1.3 * base * lead),
    ]
    return with_ci(rows, rel)


def test_a_lead_inside_the_intervals_is_a_near_tie_resolved_to_fewer_steps():
    best = best_per_level(frame(two_chains(1.01, 0.03))).set_index("concurrency")
    assert best.at[4, "best_variant"] == "eagle3-s4-k1-d5"
    assert best.at[4, "runner_up"] == "eagle3-s2-k1-d3"
    assert best.at[4, "lead"] == pytest.approx(1.01)
    assert best.at[4, "lead_lo"] < 1.0 < best.at[4, "lead_hi"]
    assert bool(best.at[4, "near_tie"])
    assert best.at[4, "tied"] == "eagle3-s2-k1-d3"
    assert best.at[4, "choice"] == "eagle3-s2-k1-d3"  # fewer draft steps
    assert best.at[4, "speedup_lo"] < best.at[4, "speedup"] < best.at[4, "speedup_hi"]


def test_a_lead_beyond_the_intervals_is_a_winner():
    best = best_per_level(frame(two_chains(1.05, 0.005))).set_index("concurrency")
    assert not bool(best.at[4, "near_tie"])
    assert best.at[4, "tied"] is None
    assert best.at[4, "choice"] == "eagle3-s4-k1-d5"
    assert best.at[4, "lead_lo"] > 1.01


def test_no_speculation_is_simpler_than_a_tied_speculative_variant():
    base = baseline_tput(8)
    rows = with_ci([level_row("r", "baseline", 8, base), chain_row("r", 2, 8, base * 1.005)], 0.02)
    best = best_per_level(frame(rows)).set_index("concurrency")
    assert best.at[8, "best_variant"] == "eagle3-s2-k1-d3"
    assert best.at[8, "choice"] == "baseline"


def test_the_policy_gain_has_an_interval_and_ties_go_to_the_simpler_rule():
    mix = TrafficMix(weights={8: 1, 16: 1})
    sure = speculation_policy(frame(with_ci(sweep_rows("r"), 0.01)), mix)
    assert (sure.variant, sure.up_to) == (SPEC, 16)  # c=16 adds 2.9%, beyond 1% + noise
    assert sure.tie_note is None
    assert sure.gain_lo < sure.gain_vs_baseline < sure.gain_hi
    assert math.isfinite(sure.gain_lo)
    assert "(95%: +" in sure.line()
    # The same curves at ±15%: c=1 and c=2 still gain beyond their intervals (1.45x, 1.35x),
    # so speculation runs there whatever the traffic mix weighs (issue 27: a clear gain at
    # a level is never given up); from c=4 the intervals reach below the margin: the
    # baseline, the simpler config, runs.
    noisy = speculation_policy(frame(with_ci(sweep_rows("r"), 0.15)), mix)
    assert (noisy.variant, noisy.up_to) == (SPEC, 2)
    assert noisy.gain_vs_baseline == 0.0  # the mix weighs only c=8 and c=16


def test_a_pivot_unsure_at_every_level_says_so():
    values = [1.01, 1.005, 1.0, 0.995, 0.99, 0.985]
    pivot = pivot_points(frame(with_ci(sweep_rows("r", ratio=ratios(values)), 0.05)))[SPEC]
    assert pivot.kind == "inconclusive"
    assert (pivot.low, pivot.high) == (None, None)
    assert pivot.describe().startswith("crosses over the whole measured range (c=1..32)")
    assert pivot.suggest is None  # no level placed anywhere would settle it: measure longer
    assert pivot.describe().endswith("measure the levels longer (load.target_ci) to tell")


def test_the_baseline_as_best_has_a_speedup_of_exactly_one():
    base = baseline_tput(32)
    rows = with_ci([level_row("r", "baseline", 32, base), chain_row("r", 2, 32, 0.8 * base)], 0.02)
    best = best_per_level(frame(rows)).set_index("concurrency")
    assert best.at[32, "best_variant"] == "baseline"
    assert (best.at[32, "speedup_lo"], best.at[32, "speedup"], best.at[32, "speedup_hi"]) == (
        1.0, 1.0, 1.0,
    )  # fmt: skip


def test_the_level_to_add_is_never_one_already_measured():
    """Measured at c=1 and 2, crossing between them, both unsure: there is no level to add
    between them (round(sqrt(2)) is 1, measured), so the pivot says to measure longer, not
    "add a level at c=1"; with c=1 and 4, the level to add is 2."""
    import pandas as pd

    from specsweep.analysis.pivot import pivot_for

    def pivot(levels: list[int]):
        ratio = pd.Series([1.1, 0.95], index=levels)
        return pivot_for(ratio, SPEC, ratio * 0.8, ratio * 1.2)

    close = pivot([1, 2])
    assert (close.kind, close.unsure, close.suggest) == ("inconclusive", (1, 2), None)
    assert "add a level" not in close.describe()
    assert "measure the levels longer" in close.describe()
    apart = pivot([1, 4])
    assert (apart.kind, apart.suggest) == ("inconclusive", 2)
