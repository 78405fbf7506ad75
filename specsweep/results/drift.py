"""A pass's throughput noise, split where it can be measured: the requests' yield, seen
inside the pass, and the server's speed (drift), measured by a calibration.

A pass of N fixed-length requests runs S server steps (decode steps, or speculative
cycles: the verify steps the server reports per request), and its throughput is its yield
(tokens per step) times its step rate. The two move for different reasons:

- **yield**: each request needs its own number of steps (speculative acceptance differs
  from request to request); those counts are independent across requests and immune to
  the client's timing, so a single pass shows their spread. ``yield_variance``: the
  ratio estimator tokens / steps over the pass's requests, its variance from their
  residuals (tokens - yield x steps, each less its prompt category's mean: a pass
  holds every category of its workload in proportion, loadgen/prompts.
  stratified_order, so which categories it drew is not noise), requests in the order
  they were sent cut into groups: one request per group, halved while the groups'
  residuals have a significant lag-1 autocorrelation (requests that ran side by side
  and moved together count as one).
- **step rate**: the server's and the client's speed (clocks, co-tenants, the
  scheduler, a CPU-bound client). Inside one pass it cannot be read honestly: the
  waves' prefill phases make time slices anti-correlated (measured on the simulator:
  lag-1 -0.6 at two slices per wave, and one slice per wave read 1.8-2.1x the pass's
  spread at C >= 16), client-side jitter shortens one gap and lengthens the next, and a
  slow spell longer than a pass hits all of it alike. ``Drift``: the between-pass
  spread beyond the yield's, measured by repeating one level a few passes
  (``drift_from_passes``; the sweep does it once per target and run, before the first
  level) and applied to every later level of the run.

Pure numpy; docs/metrics.md ("Intervals") has the long version and the measured coverage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

LAG1_Z = 1.645  # two-sided 10% test of lag-1 autocorrelation: merge groups when it fires
MIN_GROUPS = 4  # a pass's requests are never cut into fewer groups than this
CALIBRATED, ASSUMED = "calibrated", "assumed"


class YieldRecord(Protocol):
    """What of loadgen.metrics.RequestRecord the yield reads."""

    index: int
    chunk_times: tuple[float, ...]
    output_tokens: int
    spec_verify_ct: int | None
    category: str | None

    @property
    def ok(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Drift:
    """The relative standard deviation that the step rate adds to one pass's throughput.

    ``df``: the degrees of freedom of its estimate (passes - 1 of the calibration; 0: not
    measured, an assumption); ``source``: ``calibrated`` or ``assumed``.
    """

    sd: float
    df: int = 0
    source: str = ASSUMED

    @property
    def measured(self) -> bool:
        return self.df > 0 and math.isfinite(self.sd)


@dataclass(frozen=True, slots=True)
class PassYield:
    """One pass: its throughputs, and the relative variance its yield gives them."""

    output_throughput: float
    request_throughput: float
    variance: float  # relative variance of the pass's throughput from its requests' yield
    groups: int  # independent groups of requests it was estimated from (df = groups - 1)


def lag1(x: np.ndarray) -> float:
    """Lag-1 autocorrelation of a series around its mean (0 for a constant series)."""
    d = x - x.mean()
    den = float((d * d).sum())
    return float((d[1:] * d[:-1]).sum()) / den if den > 0 else 0.0


def correlated(x: np.ndarray, z: float = LAG1_Z) -> bool:
    """Whether the lag-1 autocorrelation of x is significant: under independence it is
    about normal with mean -1/n and variance 1/n."""
    n = len(x)
    return n >= 3 and abs(lag1(x) + 1.0 / n) * math.sqrt(n) > z


def _grouped(values: np.ndarray, groups: int) -> np.ndarray:
    """Sums of `groups` consecutive, near-equal runs of values."""
    return np.array([part.sum() for part in np.array_split(values, groups)])


def independent_groups(residuals: np.ndarray, minimum: int = MIN_GROUPS) -> int:
    """How many consecutive groups to cut a series into: as many as there are values,
    halved while the groups' sums are correlated at lag 1, never below `minimum`."""
    groups = len(residuals)
    while groups // 2 >= minimum and correlated(_grouped(residuals, groups)):
        groups //= 2
    return groups


def _steps(records: Sequence[YieldRecord]) -> np.ndarray:
    """Each request's server steps: its verify steps where the server reports them for
    every request, else its token-carrying chunks (one per step at stream interval 1)."""
    counts = [r.spec_verify_ct for r in records]
    if all(c is not None and c > 0 for c in counts):
        return np.asarray(counts, dtype=float)
    return np.asarray([len(r.chunk_times) for r in records], dtype=float)


def yield_variance(records: Sequence[YieldRecord]) -> tuple[float, int]:
    """(relative variance of the pass's yield, independent groups it rests on); (NaN, n)
    below two usable requests.

    The residuals are taken within each category (``_residuals``): the load draws every
    category in proportion to the workload's (loadgen/prompts.stratified_order; a
    replay sends the file's own order), so a pass's category counts are fixed by design,
    not drawn, and the level's truth is the workload's mix. The variance is scaled by
    (n - 1) / (n - K) for the K category means fitted.
    """
    done = sorted((r for r in records if r.ok and r.chunk_times), key=lambda r: r.index)
    if len(done) < 2:
        return math.nan, len(done)
    tokens = np.asarray([r.output_tokens for r in done], dtype=float)
    steps = _steps(done)
    if not (tokens.sum() > 0 and steps.sum() > 0):
        return math.nan, len(done)
    residuals, fitted = _residuals(tokens, steps, [r.category for r in done])
    groups = independent_groups(residuals, min(MIN_GROUPS, len(done)))
    e, t = _grouped(residuals, groups), _grouped(tokens, groups)
    n = len(done)
    scale = (n - 1) / (n - fitted) if n > fitted else math.nan
    return float((e * e).sum() / (groups * (groups - 1)) / t.mean() ** 2 * scale), groups


def _residuals(
    tokens: np.ndarray, steps: np.ndarray, categories: Sequence[str | None]
) -> tuple[np.ndarray, int]:
    """(each request's residual, how many means were fitted): tokens - yield x steps (the
    pass's yield: the linearised ratio), less its category's mean residual, since with
    each category's count fixed only the spread within a category moves the pass.
    Requests whose category no other request of the pass has would have no spread of
    their own, so they are pooled into one group."""
    linear = tokens - tokens.sum() / steps.sum() * steps
    names = np.asarray([str(c) for c in categories])
    kinds, counts = np.unique(names, return_counts=True)
    if (counts < 2).any():
        names = np.where(np.isin(names, kinds[counts < 2]), "", names)
    residuals = np.empty_like(linear)
    groups = np.unique(names)
    for name in groups:
        mine = names == name
        residuals[mine] = linear[mine] - linear[mine].mean()
    return residuals, len(groups)


def pass_yield(
    records: Sequence[YieldRecord], output_throughput: float, request_throughput: float
) -> PassYield | None:
    """The pass's throughputs (its window's, intervals.pass_rates) and its yield's
    variance from its own requests; None when nothing completed or nothing was counted."""
    if not any(r.ok for r in records) or not output_throughput > 0:
        return None
    variance, groups = yield_variance(records)
    return PassYield(output_throughput, request_throughput, variance, groups)


def satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance estimates, each given as
    (variance, its degrees of freedom); inf when every part is exact or zero."""
    total = sum(v for v, _ in parts)
    den = sum(v * v / df for v, df in parts if v > 0 and math.isfinite(df) and df > 0)
    return total * total / den if den > 0 else math.inf


def drift_from_passes(passes: Sequence[PassYield], source: str = CALIBRATED) -> Drift:
    """The drift that repeated passes of one level show: the spread of their throughputs
    beyond what their yields explain (method of moments, clipped at zero), with
    passes - 1 degrees of freedom. An assumed (df 0) Drift below two passes."""
    if len(passes) < 2:
        return Drift(math.nan)
    values = np.asarray([p.output_throughput for p in passes])
    between = float(values.var(ddof=1)) / float(values.mean()) ** 2
    within = [p.variance for p in passes if math.isfinite(p.variance)]
    beyond = between - (float(np.mean(within)) if within else 0.0)
    return Drift(math.sqrt(max(beyond, 0.0)), len(passes) - 1, source)


def pooled_drift(prior: Drift, passes: Sequence[PassYield]) -> Drift:
    """A measured drift updated with this level's own passes (two or more): the two
    estimates of the variance pooled by their degrees of freedom."""
    if len(passes) < 2 or not prior.measured:
        return prior
    own = drift_from_passes(passes, prior.source)
    df = prior.df + own.df
    return Drift(math.sqrt((prior.df * prior.sd**2 + own.df * own.sd**2) / df), df, prior.source)
