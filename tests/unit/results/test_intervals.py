"""The 95% intervals on synthetic data of known spread: they cover the truth about 95% of
the time, no more narrowly and not absurdly wide."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from specsweep.loadgen.calibration import CALIBRATION_PASSES
from specsweep.loadgen.metrics import RequestRecord, compute_level_metrics, compute_pass_metrics
from specsweep.results.drift import Drift, drift_from_passes, pass_yield
from specsweep.results.intervals import (
    DRIFT_FLOOR,
    Interval,
    mean_interval,
    pass_rates,
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
    six = _in_sequence([closed_loop(4, 4, rng) for _ in range(6)])
    single = compute_level_metrics(one, 4, 0.05).output_throughput_ci
    pooled = compute_level_metrics(six, 4, 0.05).output_throughput_ci
    assert pooled.rel_halfwidth < 0.75 * single.rel_halfwidth


def _as_repeat(records, k, at: float = 0.0):
    """Pass k of a level, its clock moved to start at ``at``: a level's passes follow one
    another in time, and a pass's window counts whatever arrived in it."""
    from dataclasses import replace

    return [
        replace(
            r,
            repeat=k,
            start=r.start + at,
            end=r.end + at,
            chunk_times=tuple(t + at for t in r.chunk_times),
        )
        for r in records
    ]


def _in_sequence(passes):
    """The passes as one level, each starting where the one before ended."""
    out, at = [], 0.0
    for k, records in enumerate(passes):
        moved = _as_repeat(records, k, at)
        at = max(r.end for r in moved)
        out.extend(moved)
    return out


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


# --- calibrated intervals: the yield of each pass plus the run's measured drift ----------


def speculative_pass(rng: np.random.Generator, c: int, n: int, drift_sd: float, tokens: int = 32):
    """Records of a closed loop of c streams on a speculative server: request i needs its
    own number of steps (acceptance), every step lasts 10 ms times the pass's speed (a
    drift that hits the whole pass alike), and a freed stream sends the next request."""
    speed = 1.0 + rng.normal(0.0, drift_sd)
    free = [(0.0, k) for k in range(c)]
    heapq.heapify(free)
    records = []
    for i in range(n):
        t, k = heapq.heappop(free)
        steps = int(rng.binomial(tokens, 0.35)) + 4
        times = tuple(t + 0.01 * speed * (j + 1) for j in range(steps))
        chunk = [tokens // steps] * steps
        for j in range(tokens - sum(chunk)):
            chunk[j] += 1
        records.append(
            RequestRecord(
                i, t, times[-1], times, tuple(chunk), 16, tokens, "length", steps, None, None
            )
        )
        heapq.heappush(free, (times[-1], k))
    return records


def _headline(records, c: int) -> float:
    """A pass's output throughput: over its window (results/intervals.pass_rates)."""
    return pass_rates(records, records, c)[0]


def _calibration(rng, c, n, drift_sd, passes=CALIBRATION_PASSES) -> Drift:
    parts = []
    for _ in range(passes):
        records = speculative_pass(rng, c, n, drift_sd)
        parts.append(pass_yield(records, *pass_rates(records, records, c)[:2]))
    return drift_from_passes(parts)


@pytest.mark.parametrize(("c", "n", "drift_sd"), [(1, 8, 0.01), (4, 16, 0.01), (16, 64, 0.005)])
def test_calibrated_intervals_cover_the_long_run_rate_and_are_not_too_wide(c, n, drift_sd):
    """Each pass's interval with a drift calibrated from 10 other passes (as the sweep does)
    against the long-run rate (one pass of 2,000 requests per stream, drift-free): about
    95% coverage, no more than 99%, and a median half-width within 1.3x of what the
    passes' own spread needs (1.96 x CV), the criteria benchmarks/interval_coverage.py
    holds the simulator to. A pass is read over its window, which leaves out the ramp
    and the ragged drain of its 4 requests per stream (C streams finishing one by one):
    it reads the long run's rate, and its interval is symmetric."""
    rng = np.random.default_rng(c)
    long_run = _headline(speculative_pass(rng, c, 2000 * c, 0.0), c)
    truth_passes = np.array(
        [_headline(speculative_pass(rng, c, n, drift_sd), c) for _ in range(1500)]
    )
    cv = truth_passes.std(ddof=1) / truth_passes.mean()
    drifts = [_calibration(rng, c, n, drift_sd) for _ in range(40)]
    hits = 0
    halves = []
    for k in range(240):
        records = speculative_pass(rng, c, n, drift_sd)
        out, req = throughput_intervals([records], c, drifts[k % 40])
        assert out.lo <= out.value <= out.hi and req.lo <= req.value <= req.hi
        assert req.hi / req.value == pytest.approx(out.hi / out.value)
        assert out.hi - out.value == pytest.approx(out.value - out.lo)  # symmetric
        hits += out.lo <= long_run <= out.hi
        halves.append(out.rel_halfwidth)
    assert 0.91 * 240 <= hits <= 0.99 * 240
    assert np.median(halves) <= 1.3 * 1.96 * cv
    assert abs(truth_passes.mean() / long_run - 1) < cv  # no drain: the pass reads the rate


def test_a_pass_is_read_over_its_window_by_hand():
    """C=2, N=4: stream A runs r0 (0-2 s) and r2 (2-4 s), stream B r1 (0-3 s) and r3
    (3-6 s), one token a second each. The window is (1, 4] (6 tokens: 2 tok/s); the
    drain from 4 s, where only B runs, is outside it, and so is the first second's ramp."""

    def rec(i, start, times):
        n = len(times)
        return RequestRecord(i, start, times[-1], times, (1,) * n, 8, n, "length", None, None, None)

    ragged = [
        rec(0, 0.0, (1.0, 2.0)),
        rec(1, 0.0, (1.0, 2.0, 3.0)),
        rec(2, 2.0, (3.0, 4.0)),
        rec(3, 3.0, (4.0, 5.0, 6.0)),
    ]
    out, req = throughput_intervals([ragged], 2, Drift(0.0, 9, "calibrated"))
    assert out.value == pytest.approx(6 / 3)
    assert (out.lo, out.hi) == pytest.approx((2.0, 2.0))  # one token a step, no drift
    # requests: r0 1 of 2 chunks, r1 2 of 3, r2 2 of 2, r3 1 of 3 in (1, 4]
    assert req.value == pytest.approx((1 / 2 + 2 / 3 + 1 + 1 / 3) / 3)
    out1, _ = throughput_intervals([ragged], 1, Drift(0.0, 9, "calibrated"))
    # as one stream: (1, 6], all but the two tokens at 1 s
    assert out1.value == pytest.approx(8 / 5)


def test_a_deterministic_pass_gets_exactly_the_calibrated_drift():
    """A baseline's requests all take one step per token: no yield variance, and the
    interval is the drift's, with the drift's 7 degrees of freedom (t = 2.365)."""
    records = closed_loop(4, 4, np.random.default_rng(9))
    out, _ = throughput_intervals([records], 4, Drift(0.01, 7, "calibrated"))
    assert out.value == pytest.approx(_headline(records, 4))
    assert out.rel_halfwidth == pytest.approx(2.365 * 0.01)


def test_without_a_measured_drift_the_assumed_floor_and_the_slices_hold():
    records = closed_loop(4, 4, np.random.default_rng(9))
    assumed = throughput_intervals([records], 4)
    assert throughput_intervals([records], 4, Drift(0.0075)) == assumed  # df 0: an assumption
    assert assumed[0].rel_halfwidth >= DRIFT_FLOOR - 1e-12


def test_a_level_row_says_which_drift_its_intervals_used():
    records = closed_loop(4, 4, np.random.default_rng(5))
    calibrated = compute_level_metrics(records, 4, 0.05, Drift(0.004, 7, "calibrated"))
    assert calibrated.throughput_drift == 0.004
    assert calibrated.throughput_drift_source == "calibrated"
    assumed = compute_level_metrics(records, 4, 0.05)
    assert assumed.throughput_drift is None and assumed.throughput_drift_source == "assumed"


def test_a_levels_passes_update_the_calibrated_drift():
    """Passes that spread far more than the calibration said widen the interval: the
    level's own spread is pooled with the calibration's by degrees of freedom."""
    rng = np.random.default_rng(6)
    quiet = _in_sequence([speculative_pass(rng, 4, 16, 0.0) for _ in range(4)])
    noisy = _in_sequence([speculative_pass(rng, 4, 16, 0.2) for _ in range(4)])
    drift = Drift(0.002, 7, "calibrated")
    q = compute_level_metrics(quiet, 4, 0.05, drift)
    n = compute_level_metrics(noisy, 4, 0.05, drift)
    assert n.output_throughput_ci.rel_halfwidth > 2 * q.output_throughput_ci.rel_halfwidth
