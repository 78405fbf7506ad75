"""Per-request records and the per-level summary computed from them.

Pure functions only, so every number in the results can be re-derived from the
stored records and checked by hand. Definitions follow sglang's reference
client (``sglang.bench_serving``) so numbers are comparable with it, except
that accept length is run-scoped (the server's own average includes warmup)
and steady-state throughput and repeats are specsweep's additions. All times
are ``time.perf_counter`` seconds; docs/metrics.md has the long version.

=========================  ===============================================================
field                      definition (one pass; ``ok`` = completed without error)
=========================  ===============================================================
completed / failed         requests that finished without / with an error
error_rate                 failed / all requests
duration_s                 last end - first start over all requests of the pass
input_tokens               prompt tokens of ok requests (server-reported when it says)
output_tokens              output tokens of ok requests
steady_window_s            the pass's window: from when the last of its first C requests
                           got its first token, to its (N-C+1)-th request end (from then
                           on fewer than C of its own can be in flight); its whole span
                           when it has none
output_throughput          output tokens arriving inside the window, from any request of
                           the level (the passes run as one closed loop) / its length
request_throughput         requests arriving inside the window (each chunk its share of
                           its request) / its length
total_throughput           output_throughput x (input_tokens + output_tokens) / output_tokens
achieved_concurrency       sum of ok e2e latencies / duration_s
steady_output_throughput   output_throughput (a separate number before schema 9)
ttft_ms_*                  first token-carrying chunk - send time
itl_ms_*                   per token: a chunk of n tokens g ms after the previous chunk
                           counts n gaps of g/n ms; the first chunk gives none
tpot_ms_*                  (e2e - ttft) / (output_tokens - 1), requests with > 1 token
e2e_ms_*                   end of stream ([DONE]) - send time
decode_tok_s_per_stream    mean over ok requests of (output_tokens - 1) / (e2e - ttft)
chunk_tokens_unknown       ok requests whose chunk tokens did not add up to the server's
                           final count (tokens per chunk unknown: no ITL from them)
accept_length              sum of output tokens / sum of spec_verify_ct, ok requests of
                           this level only; None when the server reports no verify steps
repeats                    measured passes (1 for a pass's own metrics)
output_throughput_cv       sample stdev / mean of output_throughput over passes; NaN for 1
*_lo / *_hi                95% interval of output/request throughput (t over time slices,
                           pooled over passes) and TTFT/ITL p50/p99 (bootstrap over requests);
                           see specsweep/results/intervals.py
target_ci_met              whether load.target_ci was reached (None without a target)
throughput_drift           the run's measured drift (relative SD of a pass's throughput
                           from the server's speed) the throughput intervals used; None
                           when none was measured (then the assumed +-1.5% floor)
throughput_drift_source    "calibrated" or "assumed" (specsweep/results/drift.py)
status / error             "failed" when nothing completed or error_rate > max; the most
                           common error as "k of n requests: message"
=========================  ===============================================================

The window leaves out a pass's ramp and drain, where fewer than C of the level's requests
are in flight: a level is one closed loop from its warm-in to its last pass's drain
(loadgen/streams.py), so a pass's window is the server at C streams throughout.

Percentiles (p50/p90/p99) interpolate linearly like numpy's default. Over
several passes the level's summary pools the latency samples and counts of all
passes, sums durations and windows, and averages the throughputs over passes.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from specsweep.results.drift import ASSUMED, Drift
from specsweep.results.intervals import (
    NAN,
    Interval,
    pass_rates,
    percentile_intervals,
    throughput_intervals,
)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one streamed request did, as raw timestamps (``time.perf_counter``)."""

    index: int  # order of issue within its pass
    start: float
    end: float
    chunk_times: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    finish_reason: str | None
    spec_verify_ct: int | None
    spec_accept_length: float | None
    error: str | None
    repeat: int = 0  # which measured pass of the level (0-based)
    category: str | None = None  # the prompt's category (the workload's; "random")
    # False: the chunks did not add up to the server's final count (an OpenAI stream
    # without per-chunk usage counts each chunk as one token): tokens per chunk unknown
    chunk_tokens_known: bool = True
    # sglang's meta_info.spec_correct_drafts_histogram (/generate): element k counts the
    # request's verify steps that accepted k drafts; None where the server sends none
    spec_correct_drafts_histogram: tuple[int, ...] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        """Seconds from send to the first chunk that carried a token."""
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def itls(self) -> list[float]:
        """Per-token inter-token latencies.

        A chunk of n tokens arriving g seconds after the previous one counts as
        n gaps of g/n: speculative decoding emits several tokens per step, and
        counting one gap per chunk would hide that speed-up. None known (empty) when the
        tokens per chunk are unknown: one gap per chunk would be that same error.
        """
        if not self.chunk_tokens_known:
            return []
        times, tokens = self.chunk_times, self.chunk_tokens
        out: list[float] = []
        for i in range(1, len(times)):
            n = tokens[i]
            out.extend([(times[i] - times[i - 1]) / n] * n)
        return out

    @property
    def tpot(self) -> float | None:
        ttft = self.ttft
        if ttft is None or self.output_tokens <= 1:
            return None
        return (self.e2e - ttft) / (self.output_tokens - 1)

    def as_dict(self) -> dict[str, Any]:
        """Plain values (tuples as lists) for storing raw records; includes ``repeat``."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """The inverse of as_dict."""
        kw = dict(data)
        kw["chunk_times"] = tuple(kw["chunk_times"])
        kw["chunk_tokens"] = tuple(kw["chunk_tokens"])
        if kw.get("spec_correct_drafts_histogram") is not None:
            kw["spec_correct_drafts_histogram"] = tuple(kw["spec_correct_drafts_histogram"])
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class LevelMetrics:
    """Summary of the measured requests of one concurrency level (or of one pass)."""

    concurrency: int
    completed: int
    failed: int
    error_rate: float
    duration_s: float
    input_tokens: int
    output_tokens: int
    request_throughput: float
    output_throughput: float
    total_throughput: float
    achieved_concurrency: float
    steady_output_throughput: float
    steady_window_s: float
    ttft_ms_mean: float
    ttft_ms_p50: float
    ttft_ms_p90: float
    ttft_ms_p99: float
    itl_ms_mean: float
    itl_ms_p50: float
    itl_ms_p90: float
    itl_ms_p99: float
    tpot_ms_mean: float
    tpot_ms_p50: float
    tpot_ms_p90: float
    tpot_ms_p99: float
    e2e_ms_mean: float
    e2e_ms_p50: float
    e2e_ms_p90: float
    e2e_ms_p99: float
    decode_tok_s_per_stream: float
    accept_length: float | None
    repeats: int
    output_throughput_cv: float
    status: str
    error: str | None
    # 95% intervals (specsweep/results/intervals.py); NaN when a level cannot give one.
    output_throughput_lo: float = NAN
    output_throughput_hi: float = NAN
    request_throughput_lo: float = NAN
    request_throughput_hi: float = NAN
    ttft_ms_p50_lo: float = NAN
    ttft_ms_p50_hi: float = NAN
    ttft_ms_p99_lo: float = NAN
    ttft_ms_p99_hi: float = NAN
    itl_ms_p50_lo: float = NAN
    itl_ms_p50_hi: float = NAN
    itl_ms_p99_lo: float = NAN
    itl_ms_p99_hi: float = NAN
    target_ci_met: bool | None = None  # load.target_ci reached (None: no target)
    # ok requests whose chunks did not add up to the server's count (tokens per chunk
    # unknown: their ITL is left out, and no accept length is read from their chunks)
    chunk_tokens_unknown: int = 0
    throughput_drift: float | None = None  # the measured drift the intervals used (None: none)
    throughput_drift_source: str | None = None  # calibrated | assumed

    @property
    def output_throughput_ci(self) -> Interval:
        return Interval(
            self.output_throughput, self.output_throughput_lo, self.output_throughput_hi
        )

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation as numpy's default; NaN if empty."""
    return _percentile_sorted(sorted(values), q)


def _percentile_sorted(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return NAN
    rank = (len(ordered) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else NAN


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else NAN


def _stats_ms(prefix: str, values_s: Sequence[float]) -> dict[str, float]:
    ms = sorted(v * 1000.0 for v in values_s)
    return {
        f"{prefix}_ms_mean": _mean(ms),
        f"{prefix}_ms_p50": _percentile_sorted(ms, 50),
        f"{prefix}_ms_p90": _percentile_sorted(ms, 90),
        f"{prefix}_ms_p99": _percentile_sorted(ms, 99),
    }


def latency_intervals(
    done: Sequence[RequestRecord], estimates: dict[str, float]
) -> dict[str, float]:
    """Bootstrap intervals of the TTFT and ITL p50/p99 (ms), by resampling requests."""
    out: dict[str, float] = {}
    ttft = [[t * 1000.0] for r in done if (t := r.ttft) is not None]
    itl = [[x * 1000.0 for x in r.itls] for r in done]
    for name, groups in (("ttft", ttft), ("itl", itl)):
        est = [estimates[f"{name}_ms_p{q}"] for q in (50, 99)]
        for q, (lo, hi) in zip((50, 99), percentile_intervals(groups, (50, 99), est), strict=True):
            out[f"{name}_ms_p{q}_lo"], out[f"{name}_ms_p{q}_hi"] = lo, hi
    return out


def _throughput_bounds(
    passes: Sequence[Sequence[RequestRecord]],
    concurrency: int,
    drift: Drift | None,
    level: Sequence[RequestRecord] | None = None,
) -> dict[str, Any]:
    out, req = throughput_intervals(passes, concurrency, drift, level)
    measured = drift is not None and drift.measured
    return {
        "output_throughput_lo": out.lo,
        "output_throughput_hi": out.hi,
        "request_throughput_lo": req.lo,
        "request_throughput_hi": req.hi,
        "throughput_drift": drift.sd if drift is not None and measured else None,
        "throughput_drift_source": drift.source if drift is not None and measured else ASSUMED,
    }


def _error_summary(records: Sequence[RequestRecord]) -> str | None:
    errors = Counter(r.error for r in records if r.error is not None)
    if not errors:
        return None if records else "no requests were run"
    message, count = errors.most_common(1)[0]
    return f"{count} of {len(records)} requests: {message}"


def compute_pass_metrics(
    records: Sequence[RequestRecord],
    concurrency: int,
    max_error_rate: float,
    drift: Drift | None = None,
    level: Sequence[RequestRecord] | None = None,
) -> LevelMetrics:
    """Summarise one measured pass; failed requests count towards the error rate only.
    ``drift``: the run's measured drift for the throughput intervals (None: assumed);
    ``level``: every record of its level (default: the pass's own), whose tokens in the
    pass's window count for its throughput."""
    level = records if level is None else level
    done = [r for r in records if r.ok]
    failed = len(records) - len(done)
    error_rate = failed / len(records) if records else 0.0
    duration = max(r.end for r in records) - min(r.start for r in records) if records else 0.0

    input_tokens = sum(r.prompt_tokens for r in done)
    output_tokens = sum(r.output_tokens for r in done)
    ttfts = [t for r in done if (t := r.ttft) is not None]
    tpots = [t for r in done if (t := r.tpot) is not None]
    e2es = [r.e2e for r in done]
    itls = [x for r in done for x in r.itls]
    decode_rates = [
        (r.output_tokens - 1) / (r.e2e - t)
        for r in done
        if (t := r.ttft) is not None and r.output_tokens > 1 and r.e2e > t
    ]
    spec = [r for r in done if r.spec_verify_ct is not None]
    verify_ct = sum(r.spec_verify_ct or 0 for r in spec)
    accept_length = sum(r.output_tokens for r in spec) / verify_ct if verify_ct > 0 else None
    output_rate, request_rate, window = pass_rates(records, level, concurrency)

    status = "failed" if not done or error_rate > max_error_rate else "ok"
    latency = {**_stats_ms("ttft", ttfts), **_stats_ms("itl", itls)}
    return LevelMetrics(
        concurrency=concurrency,
        completed=len(done),
        failed=failed,
        error_rate=error_rate,
        duration_s=duration,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        request_throughput=request_rate,
        output_throughput=output_rate,
        total_throughput=output_rate * _ratio(input_tokens + output_tokens, output_tokens),
        achieved_concurrency=_ratio(math.fsum(e2es), duration),
        steady_output_throughput=output_rate,
        steady_window_s=window,
        **latency,
        **_stats_ms("tpot", tpots),
        **_stats_ms("e2e", e2es),
        decode_tok_s_per_stream=_mean(decode_rates),
        accept_length=accept_length,
        repeats=1,
        output_throughput_cv=NAN,
        status=status,
        error=_error_summary(records),
        **_throughput_bounds([records], concurrency, drift, level),
        **latency_intervals(done, latency),
        chunk_tokens_unknown=sum(not r.chunk_tokens_known for r in done),
    )


def throughput_cv(passes: Sequence[LevelMetrics]) -> float:
    """Sample coefficient of variation of output throughput; NaN below two usable passes."""
    values = [p.output_throughput for p in passes]
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return NAN
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else NAN


def _finite_mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return _mean(finite)


def combine_passes(
    passes: Sequence[LevelMetrics],
    records: Sequence[RequestRecord],
    concurrency: int,
    max_error_rate: float,
    drift: Drift | None = None,
) -> LevelMetrics:
    """The level's summary over its passes (see the module docstring for the rules)."""
    if len(passes) <= 1:
        if passes:
            return passes[0]
        return compute_pass_metrics(records, concurrency, max_error_rate, drift)
    pooled = compute_pass_metrics(records, concurrency, max_error_rate, drift)
    return replace(
        pooled,
        duration_s=math.fsum(p.duration_s for p in passes),
        request_throughput=_finite_mean([p.request_throughput for p in passes]),
        output_throughput=_finite_mean([p.output_throughput for p in passes]),
        total_throughput=_finite_mean([p.total_throughput for p in passes]),
        achieved_concurrency=_finite_mean([p.achieved_concurrency for p in passes]),
        steady_output_throughput=_finite_mean([p.steady_output_throughput for p in passes]),
        steady_window_s=math.fsum(p.steady_window_s for p in passes),
        repeats=len(passes),
        output_throughput_cv=throughput_cv(passes),
        **_throughput_bounds(split_passes(records), concurrency, drift),
    )


def split_passes(records: Sequence[RequestRecord]) -> list[list[RequestRecord]]:
    """Records grouped by pass, in pass order."""
    groups: dict[int, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(r.repeat, []).append(r)
    return [groups[k] for k in sorted(groups)]


def compute_level_metrics(
    records: Sequence[RequestRecord],
    concurrency: int,
    max_error_rate: float,
    drift: Drift | None = None,
) -> LevelMetrics:
    """Summarise one level from its stored records, whatever number of passes they hold."""
    passes = [
        compute_pass_metrics(group, concurrency, max_error_rate, drift, records)
        for group in split_passes(records)
    ]
    return combine_passes(passes, records, concurrency, max_error_rate, drift)
