"""The 95% intervals on synthetic data of known spread: they cover the truth about 95% of
the time, no more narrowly and not absurdly wide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specsweep.loadgen.metrics import RequestRecord, compute_level_metrics, compute_pass_metrics
from specsweep.results.intervals import (
    Interval,
    mean_interval,
    percentile_intervals,
    ratio,
    t_quantile,
    throughput_intervals,
)


@pytest.mark.parametrize(("df", "exact"), [(1, 12.706), (9, 2.262), (31, 2.0395), (60, 2.0003)])
def test_t_quantiles(df, exact):
    assert t_quantile(df) == pytest.approx(exact, abs=2e-4)


def test_the_t_interval_of_a_mean_covers_95_percent_on_normal_samples():
    rng = np.random.default_rng(7)
    hits = sum(
        (iv := mean_interval(rng.normal(10.0, 2.0, size=6))).lo <= 10.0 <= iv.hi
        for _ in range(2000)
    )
    assert 0.93 <= hits / 2000 <= 0.97


def test_a_ratio_interval_is_symmetric_on_the_log_scale_and_inverts():
    a, b = Interval(110.0, 99.0, 121.0), Interval(100.0, 95.0, 105.0)
    r, inverse = ratio(a, b), ratio(b, a)
    assert r.value == pytest.approx(1.1)
    assert r.lo * r.hi == pytest.approx(r.value**2)
    assert inverse.lo == pytest.approx(1 / r.hi)
    assert inverse.hi == pytest.approx(1 / r.lo)
    # the relative half-widths (about 10% and 5%) add in quadrature: about 11%
    assert r.rel_halfwidth == pytest.approx(math.hypot(0.0998, 0.05), rel=0.02)
    assert not ratio(a, Interval(100.0)).known  # a side without an interval: none


def closed_loop(c: int, per_stream: int, rng: np.random.Generator, tokens: int = 64):
    """Records of a batched server under a closed loop of c streams: every step gives each
    of the c requests in flight one token, and steps take an iid time with mean 10 ms (a
    shared batch: the streams move together). The long-run rate is c / 0.01 tok/s."""
    steps = np.cumsum(0.01 * rng.gamma(4.0, 0.25, size=per_stream * tokens))
    records, index = [], 0
    for _ in range(c):
        t = 0.0
        for k in range(per_stream):
            chunks = tuple(steps[k * tokens : (k + 1) * tokens].tolist())
            records.append(
                RequestRecord(
                    index,
                    t,
                    chunks[-1],
                    chunks,
                    (1,) * tokens,
                    16,
                    tokens,
                    "length",
                    None,
                    None,
                    None,
                )
            )
            index, t = index + 1, chunks[-1]
    return records


@pytest.mark.parametrize(("c", "per_stream"), [(1, 8), (4, 4), (16, 4)])
def test_throughput_intervals_of_one_pass_cover_the_long_run_rate(c, per_stream):
    rng = np.random.default_rng(c)
    truth, hits, widths = c / 0.01, 0, []
    for _ in range(200):
        out, _ = throughput_intervals([closed_loop(c, per_stream, rng)], c)
        assert out.lo <= out.value <= out.hi
        hits += out.lo <= truth <= out.hi
        widths.append(out.rel_halfwidth)
    assert hits / 200 >= 0.9
    # Not absurdly wide: a pass averages 4 x 64 steps of CV 0.5, so the exact 95% half-width
    # is 1.96 x 0.5 / 16 = 6.1%; four slices (t with 3 degrees of freedom) may double it.
    assert np.median(widths) < 2 * 0.061


def test_a_level_row_carries_the_intervals_around_its_numbers():
    m = compute_pass_metrics(closed_loop(4, 4, np.random.default_rng(5)), 4, 0.05)
    for name in ("output_throughput", "request_throughput", "ttft_ms_p50", "itl_ms_p99"):
        lo, value, hi = getattr(m, f"{name}_lo"), getattr(m, name), getattr(m, f"{name}_hi")
        assert lo <= value <= hi and lo < hi, name


def test_passes_are_pooled_and_narrow_the_interval():
    rng = np.random.default_rng(3)
    one = closed_loop(4, 4, rng)
    six = [r for k in range(6) for r in _as_repeat(closed_loop(4, 4, rng), k)]
    single = compute_level_metrics(one, 4, 0.05).output_throughput_ci
    pooled = compute_level_metrics(six, 4, 0.05).output_throughput_ci
    assert pooled.rel_halfwidth < 0.75 * single.rel_halfwidth


def _as_repeat(records, k):
    from dataclasses import replace

    return [replace(r, repeat=k) for r in records]


def test_percentile_bootstrap_covers_the_true_median():
    rng = np.random.default_rng(11)
    true_median = math.exp(1.0)  # lognormal(1, 0.5)
    hits = 0
    for _ in range(200):
        values = rng.lognormal(1.0, 0.5, size=60)
        [(lo, hi)] = percentile_intervals([[v] for v in values], (50,), [np.median(values)])
        hits += lo <= true_median <= hi
    assert hits / 200 >= 0.9


def test_percentiles_resample_requests_not_tokens():
    """Two requests, each with many identical ITLs: resampling tokens would give a
    zero-width interval; resampling requests sees that there are only two."""
    groups = [[5.0] * 200, [9.0] * 200]
    [(lo, hi)] = percentile_intervals(groups, (50,), [7.0])
    assert lo == 5.0 and hi == 9.0
