"""The pieces of a calibrated interval: the lag-1 test that groups requests, the yield's
variance, the drift a calibration measures and how the level's own passes update it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from specsweep.results.drift import (
    Drift,
    PassYield,
    correlated,
    drift_from_passes,
    independent_groups,
    pooled_drift,
    satterthwaite,
    yield_variance,
)


@dataclass(frozen=True)
class Req:
    """What the yield reads of a request."""

    index: int
    chunk_times: tuple[float, ...]
    output_tokens: int
    spec_verify_ct: int | None = None
    error: str | None = None
    category: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def requests(steps: np.ndarray, tokens: int = 128, report: bool = True) -> list[Req]:
    """One pass: request i took steps[i] server steps for its tokens (reported by the
    server as spec_verify_ct when `report`, one chunk per step either way)."""
    return [
        Req(i, tuple(range(int(s))), tokens, int(s) if report else None)
        for i, s in enumerate(steps)
    ]


def test_the_lag1_test_fires_on_correlated_series_and_rarely_on_independent_ones():
    rng = np.random.default_rng(1)
    false_alarms = sum(correlated(rng.normal(size=64)) for _ in range(1000)) / 1000
    assert 0.05 <= false_alarms <= 0.15  # a two-sided 10% test
    alternating = np.tile([1.0, -1.0], 16) + rng.normal(0, 0.3, 32)
    assert correlated(alternating)
    ar = np.zeros(64)
    for i in range(1, 64):
        ar[i] = 0.8 * ar[i - 1] + rng.normal()
    assert correlated(ar)
    assert not correlated(np.zeros(16))  # a constant series: nothing to test


def test_requests_that_move_together_are_merged_into_one_group():
    rng = np.random.default_rng(2)
    single = rng.normal(size=64)
    assert independent_groups(single) == 64
    paired = np.repeat(rng.normal(size=32), 2)  # neighbours identical: one draw each
    assert independent_groups(paired) == 32
    assert independent_groups(np.repeat(rng.normal(size=8), 8), minimum=4) >= 4


def test_a_deterministic_server_has_no_yield_variance():
    reqs = requests(np.full(16, 128), report=False)  # one token per step, every request
    variance, groups = yield_variance(reqs)
    assert variance == 0.0 and groups == 16


def test_the_yield_variance_predicts_the_spread_of_passes():
    """Speculative acceptance: each request's steps are an independent draw. The variance
    one pass estimates matches the variance of the yield across many passes."""
    rng = np.random.default_rng(3)
    yields, estimates = [], []
    for _ in range(400):
        steps = rng.binomial(128, 0.35, size=32) + 10
        yields.append(32 * 128 / steps.sum())
        estimates.append(yield_variance(requests(steps))[0])
    true_var = np.var(yields, ddof=1) / np.mean(yields) ** 2
    assert np.mean(estimates) == pytest.approx(true_var, rel=0.2)


def test_the_yield_variance_of_passes_that_hold_their_categories_in_proportion():
    """Two categories accept differently (code 2x the steps of chat's yield): passes that
    hold 16 of each vary only within the categories, and the estimate from one pass
    matches that spread; taken across categories it would be about twice too large."""
    rng = np.random.default_rng(5)
    yields, estimates, pooled = [], [], []
    for _ in range(400):
        steps = np.concatenate([rng.binomial(128, 0.2, 16) + 10, rng.binomial(128, 0.5, 16) + 10])
        order = rng.permutation(32)
        reqs = [
            Req(i, tuple(range(int(steps[k]))), 128, int(steps[k]), category="ab"[k // 16])
            for i, k in enumerate(order)
        ]
        yields.append(32 * 128 / steps.sum())
        estimates.append(yield_variance(reqs)[0])
        pooled.append(yield_variance([replace(r, category=None) for r in reqs])[0])
    true_var = np.var(yields, ddof=1) / np.mean(yields) ** 2
    assert np.mean(estimates) == pytest.approx(true_var, rel=0.2)
    assert np.mean(pooled) > 3 * true_var  # the categories' difference is not the pass's noise


def test_verify_steps_are_read_where_every_request_reports_them():
    steps = np.array([40, 60, 50, 70])
    reported = requests(steps)
    chunks_only = [
        Req(r.index, tuple(range(10)), r.output_tokens, r.spec_verify_ct) for r in reported
    ]
    assert yield_variance(chunks_only)[0] > 0  # the reported steps, not the 10 chunks each
    one_missing = [*chunks_only[:3], Req(3, tuple(range(10)), 128, None)]
    assert yield_variance(one_missing)[0] == 0.0  # then the chunks, which are all alike


def test_the_drift_is_the_spread_beyond_the_yields():
    rng = np.random.default_rng(4)
    sd, within = 0.01, 0.004**2
    estimates = []
    for _ in range(500):
        values = 1000.0 * (1 + rng.normal(0, math.sqrt(sd**2 + within), 8))
        passes = [PassYield(v, v / 128, within, 32) for v in values]
        drift = drift_from_passes(passes)
        assert drift.df == 7 and drift.measured and drift.source == "calibrated"
        estimates.append(drift.sd**2)
    assert np.mean(estimates) == pytest.approx(sd**2, rel=0.15)  # clipping at 0 aside
    explained = [PassYield(1000.0 + k, 8.0, 0.05**2, 32) for k in range(8)]
    assert drift_from_passes(explained).sd == 0.0  # the yields explain every bit of it
    assert not drift_from_passes(explained[:1]).measured  # one pass measures nothing


def test_a_levels_own_passes_are_pooled_with_the_calibration_by_degrees_of_freedom():
    prior = Drift(0.01, 7)
    same = [PassYield(v, 1.0, 0.0, 8) for v in (990.0, 1010.0, 1000.0)]
    pooled = pooled_drift(prior, same)
    own = drift_from_passes(same)
    assert pooled.df == 9
    assert pooled.sd**2 == pytest.approx((7 * 0.01**2 + 2 * own.sd**2) / 9)
    assert pooled_drift(prior, same[:1]) is prior  # one pass: nothing of its own
    assert pooled_drift(Drift(0.0075), same) == Drift(0.0075)  # an assumption is not pooled


def test_satterthwaite_degrees_of_freedom():
    assert satterthwaite([(1.0, 5), (1.0, 5)]) == pytest.approx(10.0)
    assert satterthwaite([(1.0, 5), (0.0, 3)]) == pytest.approx(5.0)
    assert satterthwaite([(1.0, math.inf)]) == math.inf
