"""The closed-loop load applied at each concurrency level."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from specsweep.config.common import PositiveInt, _Model


class LoadSpec(_Model):
    """The closed-loop load applied at each concurrency level."""

    concurrency: list[PositiveInt] = Field(
        [1, 2, 4, 8, 16, 32, 64], min_length=1, description="Concurrency levels, in order."
    )
    input_len: PositiveInt = Field(256, description="Prompt tokens per request (exact).")
    output_len: PositiveInt = Field(256, description="Output tokens per request (ignore_eos).")
    requests_per_level: PositiveInt | None = Field(
        None,
        description="Requests measured per level; default max(min_requests, "
        "requests_per_stream * concurrency).",
    )
    requests_per_stream: PositiveInt = Field(
        4, description="Used when requests_per_level is unset."
    )
    min_requests: PositiveInt = Field(8, description="Used when requests_per_level is unset.")
    warmup_requests: int = Field(
        -1, ge=-1, description="Unmeasured requests before each level; -1 = one per stream."
    )
    seed: int = Field(0, description="Seed of the random prompt token ids.")
    request_timeout_s: float = Field(600.0, gt=0, description="Per-request timeout.")
    max_error_rate: float = Field(
        0.05, ge=0, le=1, description="A level with more failed requests is marked failed."
    )
    endpoint: Literal["generate", "completions", "chat"] = Field(
        "generate",
        description="'generate': sglang's native API with exact-length random token ids; "
        "'completions' / 'chat': the OpenAI-compatible endpoints with text prompts.",
    )
    dataset: Path | None = Field(
        None,
        description="Optional ShareGPT-style JSON file of prompts (text endpoints and "
        "generate); output length stays output_len.",
    )
    repeats: PositiveInt = Field(
        1, description="Measured passes per level; the row reports their spread (CV)."
    )
    target_cv: float | None = Field(
        None,
        gt=0,
        description="Repeat a level until the coefficient of variation of its output "
        "throughput is at most this (e.g. 0.03), up to max_repeats.",
    )
    max_repeats: PositiveInt = Field(5, description="Upper bound when target_cv is set.")
    target_ci: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Measure a level until the 95% interval of its output throughput is "
        "at most this wide on each side, relative (0.02: ±2%), adding passes of the level's "
        "requests up to max_level_s / max_requests. Unset: fixed counts.",
    )
    max_level_s: float = Field(
        900.0, gt=0, description="With target_ci: no further pass starts after this long."
    )
    max_requests: PositiveInt | None = Field(
        None,
        description="With target_ci: the most requests measured at a level; default 10 "
        "passes' worth.",
    )

    @field_validator("concurrency")
    @classmethod
    def _distinct_sorted(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"concurrency levels repeat: {v}")
        return sorted(v)

    @field_validator("dataset")
    @classmethod
    def _dataset_exists(cls, v: Path | None) -> Path | None:
        """Checked now: otherwise the first level would find out, after a server launch."""
        if v is not None and not v.is_file():
            raise ValueError(f"dataset {v}: no such file on this machine")
        return v

    @model_validator(mode="after")
    def _repeat_bounds(self) -> LoadSpec:
        if self.target_cv is not None and self.max_repeats < max(self.repeats, 2):
            raise ValueError(
                "target_cv needs max_repeats >= 2 (and >= repeats): a spread needs two passes"
            )
        if self.target_cv is not None and self.target_ci is not None:
            raise ValueError(
                "set target_ci or target_cv, not both: target_ci (the interval of one level's "
                "throughput) supersedes target_cv (the spread between passes)"
            )
        return self

    def max_passes(self, concurrency: int) -> int:
        """The most passes a level can run (what a disk or time estimate must allow for)."""
        if self.target_cv is not None:
            return self.max_repeats
        if self.target_ci is not None:
            return max(
                self.repeats, self.max_requests_at(concurrency) // self.num_requests(concurrency)
            )
        return self.repeats

    def max_requests_at(self, concurrency: int) -> int:
        """With target_ci: the cap on measured requests at this level."""
        if self.max_requests is not None:
            return max(self.max_requests, self.num_requests(concurrency))
        return 10 * self.num_requests(concurrency)

    def num_requests(self, concurrency: int) -> int:
        if self.requests_per_level is not None:
            return self.requests_per_level
        return max(self.min_requests, self.requests_per_stream * concurrency)

    def num_warmup(self, concurrency: int) -> int:
        return concurrency if self.warmup_requests < 0 else self.warmup_requests
