"""How a sweep chooses what to launch: every variant (grid) or a search that launches only
what can still change the answer (adaptive; see docs/search.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specsweep.config.common import PositiveInt, _Model

# The same 1% vLLM's tuner and specsweep's near-tie rule use (analysis.params.TIE_MARGIN);
# repeated here because config must not import the analysis.
DEFAULT_MARGIN = 0.01


def search_shorthand(value: object) -> object:
    """`search: adaptive` (or `grid`) stands for `{mode: ...}` with the defaults."""
    return {"mode": value} if isinstance(value, str) else value


class SearchSpec(_Model):
    """grid: launch every variant at every level (the default). adaptive: the baseline and
    two seed chains first, then, one at a time, the unmeasured variant whose predicted
    upper bound beats the best measured throughput at some level by the most; stop when
    none can beat it by more than `margin`, or when the budget is spent. The answer is
    built from measurements only; predictions are stored apart."""

    mode: Literal["grid", "adaptive"] = Field(
        "grid", description="grid: every variant; adaptive: only what can change the answer."
    )
    max_launches: PositiveInt | None = Field(
        None, description="adaptive: at most this many server launches (the baseline counts)."
    )
    max_server_minutes: float | None = Field(
        None,
        gt=0,
        description="adaptive: no new launch once the run's servers have held their GPUs "
        "this long (launch to teardown, summed over variants).",
    )
    margin: float = Field(
        DEFAULT_MARGIN,
        ge=0,
        lt=0.5,
        description="A variant must be able to beat the best by more than this (relative) "
        "to be launched, and must trail it by more than this for a level to be skipped.",
    )
    skip_levels: bool = Field(
        True,
        description="adaptive: stop measuring a variant's higher levels once it trails the "
        "best and the baseline by more than the margin at two consecutive levels, falling.",
    )
    confirm_top: bool = Field(
        False,
        description="adaptive: measure the top level of a variant whose higher levels were "
        "skipped (one confirmation of the trend).",
    )

    @model_validator(mode="after")
    def _budget_needs_search(self) -> SearchSpec:
        if self.mode == "grid" and (
            self.max_launches is not None or self.max_server_minutes is not None
        ):
            raise ValueError(
                "max_launches / max_server_minutes bound an adaptive search; a grid launches "
                "every variant (set mode: adaptive, or remove the budget)"
            )
        return self

    @property
    def adaptive(self) -> bool:
        return self.mode == "adaptive"
