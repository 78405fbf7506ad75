"""Per-request records and the per-level summary computed from them.

Pure functions only, so every number in the results can be re-derived from the
stored records and checked by hand. Definitions follow sglang's reference
client (``sglang.bench_serving``) so numbers are comparable with it, except
that accept length is run-scoped (the server's own average includes warmup).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one streamed request did, as raw timestamps (``time.perf_counter``)."""

    index: int
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
        counting one gap per chunk would hide that speed-up.
        """
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
        """Plain values (tuples as lists) for storing raw records."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }


@dataclass(frozen=True, slots=True)
class LevelMetrics:
    """Summary of the measured requests of one concurrency level."""

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
    status: str
    error: str | None

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


def _error_summary(records: Sequence[RequestRecord]) -> str | None:
    errors = Counter(r.error for r in records if r.error is not None)
    if not errors:
        return None if records else "no requests were run"
    message, count = errors.most_common(1)[0]
    return f"{count} of {len(records)} requests: {message}"


def compute_level_metrics(
    records: Sequence[RequestRecord], concurrency: int, max_error_rate: float
) -> LevelMetrics:
    """Summarise one level; failed requests count towards the error rate only."""
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

    status = "failed" if not done or error_rate > max_error_rate else "ok"
    return LevelMetrics(
        concurrency=concurrency,
        completed=len(done),
        failed=failed,
        error_rate=error_rate,
        duration_s=duration,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        request_throughput=_ratio(len(done), duration),
        output_throughput=_ratio(output_tokens, duration),
        total_throughput=_ratio(input_tokens + output_tokens, duration),
        achieved_concurrency=_ratio(math.fsum(e2es), duration),
        **_stats_ms("ttft", ttfts),
        **_stats_ms("itl", itls),
        **_stats_ms("tpot", tpots),
        **_stats_ms("e2e", e2es),
        decode_tok_s_per_stream=_mean(decode_rates),
        accept_length=accept_length,
        status=status,
        error=_error_summary(records),
    )
