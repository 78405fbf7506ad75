"""95% intervals of a level's numbers from its own requests, one pass or several.

Throughput (output and request), two ways, by what the run knows of its drift:

- **Calibrated** (the sweep measured this run's drift on the target, specsweep/results/
  drift.py): a pass's variance is its yield's (tokens per server step: the requests'
  speculative acceptance, seen in the pass's own requests, grouped where a lag-1 test
  finds neighbours correlated) plus the drift (the step rate's pass-to-pass spread, from
  the calibration's repeated passes, pooled with the level's own passes when it has two
  or more); the interval is Student's t around the mean of the passes' throughputs
  (each over its window, ``pass_rates``), its degrees of freedom by Welch-Satterthwaite.
- **Assumed** (no calibration: a run that skipped it, or ``loadgen`` on its own): batch
  means over time slices. A pass's window (``pass_window``: from when its first C
  requests all have a token to when fewer than C of its own can be in flight) is cut
  into equal slices, one per wave of C requests (at least
  ``MIN_SLICES``, at most ``MAX_SLICES``); each slice's rate is the tokens (or
  request-equivalents) in it over its length, scaled to the pass's own throughput, and
  the interval is Student's t over the slices of all passes. Drift between passes that
  no pass sees from inside is held at ``DRIFT_FLOOR`` (+-1.5%, measured once on one
  machine) until three passes measure it: from then on the t-interval over the passes'
  own throughputs counts instead where wider.

Latency percentiles: a percentile bootstrap over requests (a request's ITLs move
together, so requests are resampled, not tokens), ``BOOTSTRAP`` resamples from a
fixed seed so a stored level always re-derives the same interval.

Pure numpy; docs/metrics.md has the long version and the coverage measured by
benchmarks/interval_coverage.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specsweep.results.drift import Drift, PassYield, pass_yield, pooled_drift, satterthwaite


class RequestRecord(Protocol):
    """What of loadgen.metrics.RequestRecord the slices and the yield read."""

    index: int
    start: float
    end: float
    chunk_times: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    output_tokens: int
    spec_verify_ct: int | None

    @property
    def ok(self) -> bool: ...


# Assumed between-pass drift (no calibration), until three passes measure it: the
# simulator's deterministic baseline on a shared 2-core machine moved 0.6-1.1% (CV) from
# pass to pass while its slices saw about half that (benchmarks/interval_coverage.py).
DRIFT_FLOOR = 0.015
MIN_SLICES, MAX_SLICES = 4, 10  # time slices per pass: one per wave of C requests, clamped
BOOTSTRAP = 400  # resamples for the latency percentiles
CONFIDENCE = 0.95
NAN = float("nan")
METHOD = (
    "calibrated: t over yield + measured drift; assumed: t over time slices (one per wave) "
    "with a +-1.5% floor; latency: bootstrap over requests"
)


@dataclass(frozen=True, slots=True)
class Interval:
    """A value and its 95% interval; lo/hi are NaN when it cannot be given."""

    value: float
    lo: float = NAN
    hi: float = NAN

    @property
    def known(self) -> bool:
        """An interval is given (it may be unbounded above: a ratio over a side that may be
        zero is [0, inf), which says it bounds nothing, not that there is no interval)."""
        return not (math.isnan(self.lo) or math.isnan(self.hi))

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width over the value (0.02: ±2%); NaN when unknown."""
        if not self.known or not self.value:
            return NAN
        return (self.hi - self.lo) / 2.0 / abs(self.value)

    def __truediv__(self, other: Interval) -> Interval:
        return ratio(self, other)


# Student's t 0.975 quantiles for 1..30 degrees of freedom (any statistics table).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964


def t_quantile(df: int) -> float:
    """Student's t 0.975 quantile: the table up to 30, then the Cornish-Fisher expansion
    (within 1e-4 of the exact value from there on)."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = _Z975, float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


def mean_interval(samples: Sequence[float] | np.ndarray) -> Interval:
    """Student's t interval of a mean; lo/hi NaN below two samples."""
    x = np.asarray(samples, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return Interval(NAN)
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean)
    half = t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return Interval(mean, mean - half, mean + half)


def ratio(a: Interval, b: Interval) -> Interval:
    """a / b for independent measurements: relative half-widths add in quadrature, applied
    on the log scale so the interval stays positive and a / b and b / a agree."""
    if not (b.value and math.isfinite(a.value) and math.isfinite(b.value)):
        return Interval(NAN)
    value = a.value / b.value
    if not (a.known and b.known) or a.value <= 0 or b.value <= 0:
        return Interval(value)
    if a.lo <= 0 or b.lo <= 0:  # a side that may be zero: the ratio is not bounded
        return Interval(value, 0.0, math.inf)
    spread = math.hypot(_log_halfwidth(a), _log_halfwidth(b))
    return Interval(value, value * math.exp(-spread), value * math.exp(spread))


def _log_halfwidth(x: Interval) -> float:
    lo = max(x.lo, x.value * 1e-9)
    return (math.log(x.hi) - math.log(lo)) / 2.0


def slices_for(requests: int, concurrency: int) -> int:
    """One slice per wave of `concurrency` requests, within [MIN_SLICES, MAX_SLICES]."""
    return int(min(MAX_SLICES, max(MIN_SLICES, round(requests / max(concurrency, 1)))))


def steady_window(records: Sequence[RequestRecord], concurrency: int) -> tuple[float, float]:
    """(t0, t1) of one pass's steady state; t1 <= t0 when it has none.

    t0: the first C requests (by send time) have all received a token. t1: the
    (N-C+1)-th end of a request: a closed loop replaces each of the first N-C
    ends with a new request, so from this end on at most C-1 can be in flight.
    """
    if not records:
        return (0.0, 0.0)
    c = min(concurrency, len(records))
    first = sorted(records, key=lambda r: r.start)[:c]
    t0 = max(r.chunk_times[0] if r.chunk_times else r.end for r in first)
    t1 = sorted(r.end for r in records)[len(records) - c]
    return (t0, t1)


def pass_window(records: Sequence[RequestRecord], concurrency: int) -> tuple[float, float]:
    """The window a pass's throughput is read over: its steady window, else (a pass too
    short to have one) its whole span, first send to last end; (0, 0) when empty."""
    if not records:
        return (0.0, 0.0)
    t0, t1 = steady_window(records, concurrency)
    if t1 > t0:
        return (t0, t1)
    return (min(r.start for r in records), max(r.end for r in records))


def window_counts(records: Sequence[RequestRecord], t0: float, t1: float) -> tuple[float, float]:
    """(output tokens, requests) of ok requests arriving in (t0, t1]: each chunk's tokens
    (scaled up evenly where a request's chunks add up to less than its output, OpenAI
    streams without per-chunk usage), a request counted as its chunks' shares of it."""
    tokens = requests = 0.0
    for r in records:
        if not r.ok or not r.chunk_times:
            continue
        counted = sum(r.chunk_tokens)
        if counted <= 0:
            continue
        inside = sum(n for t, n in zip(r.chunk_times, r.chunk_tokens, strict=True) if t0 < t <= t1)
        tokens += inside * r.output_tokens / counted
        requests += inside / counted
    return tokens, requests


def steady_tokens(records: Sequence[RequestRecord], t0: float, t1: float) -> float:
    """Output tokens of ok requests whose chunk arrived in (t0, t1] (window_counts)."""
    return window_counts(records, t0, t1)[0]


def pass_rates(
    records: Sequence[RequestRecord], level: Sequence[RequestRecord], concurrency: int
) -> tuple[float, float, float]:
    """(output tok/s, requests/s, window s) of one pass: what arrived in its window
    (pass_window) from any request of the level, over the window's length.

    The level's passes run as one closed loop after a warm-in (loadgen/streams.py), so a
    pass's window holds C requests in flight throughout, some of them the pass before's
    or after's: their tokens count where they arrived. Its ramp and drain are outside.
    """
    t0, t1 = pass_window(records, concurrency)
    if not t1 > t0:
        return (NAN, NAN, 0.0)
    tokens, requests = window_counts(level, t0, t1)
    return (tokens / (t1 - t0), requests / (t1 - t0), t1 - t0)


def pass_parts(
    passes: Sequence[Sequence[RequestRecord]],
    concurrency: int,
    level: Sequence[RequestRecord] | None = None,
) -> list[PassYield]:
    """Each pass's throughputs (its window's) and yield variance (the passes that
    completed); ``level``: the records whose tokens count in the windows (default: all
    of ``passes``)."""
    if level is None:
        level = [r for records in passes for r in records]
    out = []
    for records in passes:
        if not records:
            continue
        rate, req, _ = pass_rates(records, level, concurrency)
        if (y := pass_yield(records, rate, req)) is not None:
            out.append(y)
    return out


def slice_rates(
    records: Sequence[RequestRecord], slices: int, window: tuple[float, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(output tok/s, requests/s) in each of `slices` equal slices of `window` (default:
    the whole pass, first send to last end).

    Each ok request's tokens are placed at its chunks' arrival times (scaled up evenly
    where the chunks' tokens add up to less than the request's output), a request as the
    share of its tokens per chunk: window_counts' rule, per slice.
    """
    if not records:
        return np.zeros(0), np.zeros(0)
    t0, t1 = window or (min(r.start for r in records), max(r.end for r in records))
    if not t1 > t0:
        return np.zeros(0), np.zeros(0)
    times: list[float] = []
    tokens: list[float] = []
    shares: list[float] = []
    for r in records:
        if not r.ok or not r.chunk_times:
            continue
        counted = sum(r.chunk_tokens)
        if counted <= 0:
            continue
        scale = r.output_tokens / counted
        times.extend(r.chunk_times)
        tokens.extend(n * scale for n in r.chunk_tokens)
        shares.extend(n / counted for n in r.chunk_tokens)
    edges = np.linspace(t0, t1, slices + 1)
    width = (t1 - t0) / slices
    at = np.asarray(times, dtype=float)
    out, _ = np.histogram(at, bins=edges, weights=np.asarray(tokens, dtype=float))
    req, _ = np.histogram(at, bins=edges, weights=np.asarray(shares, dtype=float))
    return out / width, req / width


def _pass_slices(
    records: Sequence[RequestRecord], level: Sequence[RequestRecord], concurrency: int
) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """One pass's slice rates (output, requests) over its window, from what arrived there
    from any of the level's requests, and its headline (pass_rates)."""
    empty = (np.zeros(0), np.zeros(0), (NAN, NAN))
    if not records:
        return empty
    t0, t1 = pass_window(records, concurrency)
    if not t1 > t0:
        return empty
    out_rate, req_rate, _ = pass_rates(records, level, concurrency)
    slices = slices_for(max(len(records) - concurrency, concurrency), concurrency)
    out, req = slice_rates(level, slices, (t0, t1))
    return out, req, (out_rate, req_rate)


def throughput_intervals(
    passes: Sequence[Sequence[RequestRecord]],
    concurrency: int,
    drift: Drift | None = None,
    level: Sequence[RequestRecord] | None = None,
) -> tuple[Interval, Interval]:
    """(output throughput, request throughput) of these passes: the mean of the passes'
    throughputs (each over its window), with its 95% interval.

    ``drift``: this run's measured drift (specsweep/results/drift.py); without one (None
    or not measured) the slices and the assumed ``DRIFT_FLOOR`` (module docstring).
    ``level``: the records whose tokens count in the passes' windows (default: all of
    ``passes``; one pass of a level gives the level's).
    """
    if level is None:
        level = [r for records in passes for r in records]
    if drift is not None and drift.measured:
        return _calibrated_intervals(passes, concurrency, drift, level)
    return _sliced_intervals(passes, concurrency, level)


def _calibrated_intervals(
    passes: Sequence[Sequence[RequestRecord]],
    concurrency: int,
    drift: Drift,
    level: Sequence[RequestRecord],
) -> tuple[Interval, Interval]:
    """Student's t of the mean over passes: each pass's yield variance plus the drift
    (pooled with the passes' own spread from two passes on), Welch-Satterthwaite df."""
    parts = pass_parts(passes, concurrency, level)
    if not parts:
        return Interval(NAN), Interval(NAN)
    n = len(parts)
    known = [p for p in parts if math.isfinite(p.variance)]
    within = sum(p.variance for p in known) / n**2
    drift = pooled_drift(drift, parts)
    spread = drift.sd**2 / n
    df = satterthwaite([(within, sum(p.groups - 1 for p in known)), (spread, drift.df)])
    t = t_quantile(max(1, math.floor(df))) if math.isfinite(df) else _Z975
    rel = t * math.sqrt(within + spread)
    out = []
    for value in (
        float(np.mean([p.output_throughput for p in parts])),
        float(np.mean([p.request_throughput for p in parts])),
    ):
        out.append(Interval(value, value * (1.0 - rel), value * (1.0 + rel)))
    return out[0], out[1]


def _sliced_intervals(
    passes: Sequence[Sequence[RequestRecord]], concurrency: int, level: Sequence[RequestRecord]
) -> tuple[Interval, Interval]:
    """Without a measured drift: Student's t over the pooled slices of the passes'
    windows, each pass's slices scaled to its own throughput (the slices give the spread,
    the pass the level), at least ``DRIFT_FLOOR`` until three passes measure the
    drift; from three passes on, the t-interval over the passes' own throughputs counts
    instead where wider.
    """
    parts = [_pass_slices(records, level, concurrency) for records in passes]
    parts = [p for p in parts if len(p[0]) and float(p[0].mean()) > 0]
    if not parts:
        return Interval(NAN), Interval(NAN)
    out = []
    for k in (0, 1):
        headlines = [p[2][k] for p in parts]
        scaled = [p[k] * (p[2][k] / float(p[k].mean())) for p in parts if p[k].mean() > 0]
        within = mean_interval(np.concatenate(scaled)) if scaled else Interval(NAN)
        value = float(np.mean(headlines))
        if not within.known:
            out.append(Interval(value))
            continue
        half = (within.hi - within.lo) / 2.0
        if len(parts) >= 3:
            across = mean_interval(headlines)
            half = max(half, (across.hi - across.lo) / 2.0)
        else:
            half = max(half, DRIFT_FLOOR * abs(value))
        out.append(Interval(value, value - half, value + half))
    return out[0], out[1]


def _weighted_quantiles(
    ordered: np.ndarray, owner: np.ndarray, counts: np.ndarray, q: float
) -> np.ndarray:
    """The q-quantile (0-1) of `ordered` (sorted) under each resample's request counts.

    counts: (resamples, requests); a value weighs its request's count in that resample.
    The inverted-CDF quantile: the first value whose cumulative weight reaches q.
    """
    out = np.empty(len(counts))
    step = max(1, 4_000_000 // len(ordered))  # bounds the memory: rows x values floats
    for i in range(0, len(counts), step):
        cum = np.cumsum(counts[i : i + step, owner], axis=1)
        pos = (cum < q * cum[:, -1:]).sum(axis=1)
        out[i : i + step] = ordered[np.minimum(pos, len(ordered) - 1)]
    return out


def percentile_intervals(
    per_request: Sequence[Sequence[float]],
    qs: Sequence[float],
    estimates: Sequence[float],
    *,
    resamples: int = BOOTSTRAP,
    seed: int = 0,
) -> list[tuple[float, float]]:
    """(lo, hi) of each percentile q (0-100) of the pooled values, by resampling requests.

    per_request: one sequence of values (ms) per request (one TTFT, or its ITLs);
    estimates: the reported percentiles, which each interval is widened to contain (the
    resamples use the inverted-CDF quantile, the report numpy's linear one: with few
    requests a p99 can sit just outside its resamples' range).
    """
    groups = [np.asarray(v, dtype=float) for v in per_request if len(v)]
    if len(groups) < 2:
        return [(NAN, NAN) for _ in qs]
    values = np.concatenate(groups)
    owner = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    order = np.argsort(values, kind="stable")
    ordered, owner = values[order], owner[order]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(groups), size=(resamples, len(groups)))
    counts = np.zeros((resamples, len(groups)))
    np.add.at(counts, (np.arange(resamples)[:, None], picks), 1.0)
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    out = []
    for q, est in zip(qs, estimates, strict=True):
        boot = _weighted_quantiles(ordered, owner, counts, q / 100.0)
        lo, hi = float(np.percentile(boot, tail)), float(np.percentile(boot, 100 - tail))
        out.append((min(lo, est), max(hi, est)) if math.isfinite(est) else (lo, hi))
    return out
