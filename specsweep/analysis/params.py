"""The user-facing parameters of the answer: traffic mix, latency SLO, regression policy.

Pydantic with unknown keys forbidden, like the sweep config: they arrive from
the CLI, YAML and Prefect's deployment form, and a typo must fail loudly
instead of silently meaning "no constraint".
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, field_validator

# Two variants whose throughputs the intervals cannot separate by more than this are a
# near-tie, resolved to the simpler one (vLLM's tune_speculative_k prefers the smaller K
# within 1%).
TIE_MARGIN = 0.01

# Direction of each metric the regression check can judge: is a larger value better?
HIGHER_IS_BETTER: dict[str, bool] = {
    "output_throughput": True,
    "total_throughput": True,
    "request_throughput": True,
    "steady_output_throughput": True,
    "decode_tok_s_per_stream": True,
    "accept_length": True,
    # an exported adaptive config's throughput / the best a tier config reaches (per level)
    "policy_share": True,
    **{
        f"{name}_ms_{stat}": False
        for name in ("ttft", "itl", "tpot", "e2e")
        for stat in ("mean", "p50", "p90", "p99")
    },
}


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrafficMix(_Params):
    """How the server's time is spread over concurrency levels.

    A policy is judged by the throughput it delivers over that mix: the
    weighted mean of the per-level throughputs, each weight being the share
    of time spent at that level.
    """

    weights: dict[PositiveInt, float] | None = Field(
        None,
        title="Weights per concurrency",
        description="Share of serving time at each measured concurrency, e.g. {1: 0.5, 8: 0.3, "
        "64: 0.2}; normalised to sum 1. Empty: uniform over the measured levels.",
    )

    @field_validator("weights")
    @classmethod
    def _non_negative(cls, v: dict[int, float] | None) -> dict[int, float] | None:
        if v is None:
            return v
        if any(w < 0 for w in v.values()):
            raise ValueError("traffic weights must be >= 0")
        if not sum(v.values()) > 0:
            raise ValueError("traffic weights must not all be zero")
        return v

    def resolve(self, levels: list[int]) -> dict[int, float]:
        """Normalised weights over `levels`; a weighted level that was not measured is an error."""
        if not self.weights:
            return {c: 1.0 / len(levels) for c in levels} if levels else {}
        missing = sorted(set(self.weights) - set(levels))
        if missing:
            raise ValueError(
                f"traffic mix weights concurrency {missing}, not measured for the baseline "
                f"and a speculative variant (measured: {levels})"
            )
        total = sum(self.weights.values())
        return {c: self.weights.get(c, 0.0) / total for c in levels}

    def describe(self) -> str:
        if not self.weights:
            return "uniform over the measured levels"
        total = sum(self.weights.values())
        return ", ".join(f"c={c}: {w / total:.0%}" for c, w in sorted(self.weights.items()))


class LatencySLO(_Params):
    """Latency limits a variant must meet at a level to be chosen there."""

    ttft_p99_ms: PositiveFloat | None = Field(
        None, title="TTFT p99 limit (ms)", description="Time to first token, 99th percentile."
    )
    itl_p99_ms: PositiveFloat | None = Field(
        None, title="ITL p99 limit (ms)", description="Inter-token latency, 99th percentile."
    )

    @property
    def active(self) -> bool:
        return self.ttft_p99_ms is not None or self.itl_p99_ms is not None

    def describe(self) -> str:
        parts = []
        if self.ttft_p99_ms is not None:
            parts.append(f"TTFT p99 <= {self.ttft_p99_ms:g} ms")
        if self.itl_p99_ms is not None:
            parts.append(f"ITL p99 <= {self.itl_p99_ms:g} ms")
        return " and ".join(parts) or "none"


class RegressionPolicy(_Params):
    """When tonight's number differs from its own history enough to page someone.

    A change is a regression only when it is in the bad direction, larger than
    `mad_threshold` robust standard deviations of the recent history, and
    larger than the metric's minimum relative change: both must hold, so a
    very quiet history cannot turn a 1% wobble into a page.
    """

    metrics: list[str] = Field(
        ["output_throughput", "ttft_ms_p50", "itl_ms_p50", "policy_share"],
        min_length=1,
        title="Metrics",
        description="Level columns to judge; throughputs are better higher, latencies lower.",
    )
    history_runs: PositiveInt = Field(
        7, title="History window", description="How many earlier runs (nights) to compare with."
    )
    min_history: PositiveInt = Field(
        3,
        title="Minimum history",
        description="Fewer earlier runs than this: the verdict is 'insufficient history'.",
    )
    mad_threshold: PositiveFloat = Field(
        4.0,
        title="Noise threshold (robust z)",
        description="Change must exceed this many robust standard deviations "
        "(1.4826 x median absolute deviation) of the history.",
    )
    min_relative_change: PositiveFloat = Field(
        0.05,
        title="Minimum throughput change",
        description="Relative change below which a throughput metric is never flagged (0.05 = 5%).",
    )
    min_relative_change_latency: PositiveFloat = Field(
        0.10,
        title="Minimum latency change",
        description="Relative change below which a latency metric is never flagged.",
    )
    on_failed_level: Literal["regression", "ignore"] = Field(
        "regression",
        title="Failed level",
        description="A level (or variant) that failed tonight but succeeded in its history.",
    )

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, v: list[str]) -> list[str]:
        unknown = [m for m in v if m not in HIGHER_IS_BETTER]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; known: {sorted(HIGHER_IS_BETTER)}")
        return v

    def min_change(self, metric: str) -> float:
        if HIGHER_IS_BETTER[metric]:
            return self.min_relative_change
        return self.min_relative_change_latency
