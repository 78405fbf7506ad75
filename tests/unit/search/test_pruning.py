"""The level-skip rule: a variant trailing the best and the baseline, falling, at two
consecutive levels is not measured higher up; anything less keeps it measured."""

from __future__ import annotations

import pandas as pd

from specsweep.search.pruning import skip_reason

LEVELS = [1, 2, 4, 8, 16, 32]


def _rows(curves: dict[str, dict[int, float]], half: float = 0.01) -> pd.DataFrame:
    rows = []
    for variant, curve in curves.items():
        for c, value in curve.items():
            rows.append(
                {
                    "variant": variant,
                    "is_baseline": variant == "baseline",
                    "concurrency": c,
                    "status": "ok",
                    "output_throughput": value,
                    "output_throughput_lo": value * (1 - half),
                    "output_throughput_hi": value * (1 + half),
                    "error": None,
                }
            )
    return pd.DataFrame(rows)


BASE = {c: 100.0 * c for c in LEVELS}


def test_trailing_and_falling_at_two_levels_skips_the_next() -> None:
    spec = {1: 150.0, 2: 250.0, 4: 320.0, 8: 560.0}  # 0.80x at c=4, 0.70x at c=8
    levels = _rows({"baseline": BASE, "s3": spec})
    reason = skip_reason(levels, "s3", 16, LEVELS, 0.01)
    assert reason is not None
    assert "c=4" in reason and "c=8" in reason and "20%" in reason and "30%" in reason
    # the levels it was measured at are not up for skipping: the rule looks below only
    assert skip_reason(levels, "s3", 8, LEVELS, 0.01) is None


def test_not_falling_keeps_measuring() -> None:
    spec = {1: 150.0, 2: 250.0, 4: 280.0, 8: 580.0}  # 0.70x then 0.725x: recovering
    levels = _rows({"baseline": BASE, "s3": spec})
    assert skip_reason(levels, "s3", 16, LEVELS, 0.01) is None


def test_within_the_margin_or_the_interval_keeps_measuring() -> None:
    spec = {1: 150.0, 2: 250.0, 4: 398.0, 8: 795.0}  # 0.995x, 0.994x: inside 1%
    levels = _rows({"baseline": BASE, "s3": spec})
    assert skip_reason(levels, "s3", 16, LEVELS, 0.01) is None
    # 0.97x, 0.96x: outside 1% by value, but the intervals (±3% each) reach past 0.99x
    spec = {1: 150.0, 2: 250.0, 4: 388.0, 8: 768.0}
    assert skip_reason(_rows({"baseline": BASE, "s3": spec}), "s3", 16, LEVELS, 0.01) is not None
    assert skip_reason(_rows({"baseline": BASE, "s3": spec}, 0.03), "s3", 16, LEVELS, 0.01) is None


def test_ahead_of_the_baseline_keeps_measuring_even_behind_the_best() -> None:
    best = {c: 200.0 * c for c in LEVELS}  # another variant far ahead everywhere
    spec = {1: 150.0, 2: 250.0, 4: 480.0, 8: 880.0}  # 1.2x then 1.1x the baseline: falling
    levels = _rows({"baseline": BASE, "s1": best, "s3": spec})
    assert skip_reason(levels, "s3", 16, LEVELS, 0.01) is None


def test_a_level_without_the_baseline_or_a_failed_level_keeps_measuring() -> None:
    spec = {1: 150.0, 2: 250.0, 4: 320.0, 8: 560.0}
    levels = _rows({"baseline": {c: v for c, v in BASE.items() if c != 4}, "s3": spec})
    assert skip_reason(levels, "s3", 16, LEVELS, 0.01) is None
    levels = _rows({"baseline": BASE, "s3": spec})
    levels.loc[(levels["variant"] == "s3") & (levels["concurrency"] == 8), "status"] = "failed"
    assert skip_reason(levels, "s3", 16, LEVELS, 0.01) is None


def test_a_resumed_variant_keeps_the_first_reason() -> None:
    spec = {1: 150.0, 2: 250.0, 4: 320.0, 8: 560.0}
    levels = _rows({"baseline": BASE, "s3": spec})
    first = skip_reason(levels, "s3", 16, LEVELS, 0.01)
    assert first is not None
    skipped = pd.DataFrame(
        [{"variant": "s3", "is_baseline": False, "concurrency": 16, "status": "skipped",
          "output_throughput": None, "error": first}]
    )  # fmt: skip
    levels = pd.concat([levels, skipped], ignore_index=True)
    # c=32's two levels below are 8 (measured) and 16 (skipped): the rule alone would not
    # fire; the stored skip carries over, so a resumed search makes the same choice
    assert skip_reason(levels, "s3", 32, LEVELS, 0.01) == first
