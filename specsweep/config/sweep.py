"""A whole sweep: target, server, load and the variants (sweep sections or a list)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, field_validator, model_validator

from specsweep.config.algorithm_sweep import AlgorithmSweep
from specsweep.config.common import (
    SPEC_V2_ENV,
    EnvMap,
    ExtraArgs,
    PositiveInt,
    SchemaAlsoAccepts,
    TreeAlgorithm,
    _Model,
)
from specsweep.config.load import LoadSpec
from specsweep.config.search import SearchSpec, search_shorthand
from specsweep.config.server import LOOPBACK_HOSTS, ServerSpec
from specsweep.config.targets import LocalTarget, SshTarget, Target
from specsweep.config.variant import Variant
from specsweep.results.location import results_root_value


class StepSweep(_Model):
    """Baseline plus one speculative variant per num_steps, at a fixed topk."""

    algorithm: TreeAlgorithm = Field("EAGLE3", description="--speculative-algorithm.")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: list[PositiveInt] = Field(
        [1, 2, 3], min_length=1, description="One variant per value (--speculative-num-steps)."
    )
    topk: PositiveInt = Field(1, description="--speculative-eagle-topk for every variant.")
    num_draft_tokens: PositiveInt | None = Field(
        None, description="Fixed draft tokens; with topk=1 it is num_steps+1 per variant."
    )
    spec_v2: bool = Field(False, description=f"Every variant on the overlap path ({SPEC_V2_ENV}).")
    env: EnvMap = Field(default_factory=dict, description="Extra environment for this variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @field_validator("num_steps")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"num_steps repeat: {v}")
        return sorted(v)


DEFAULT_MAX_DRAFT_TOKENS = 16


def draft_tokens_rule(num_steps: int, topk: int, cap: int) -> int:
    """A chain drafts num_steps+1 (sglang forces it); a wider tree its full size
    num_steps*topk+1, capped."""
    return num_steps + 1 if topk == 1 else min(num_steps * topk + 1, cap)


class TopkSweep(_Model):
    """Baseline plus one speculative variant per topk, at a fixed num_steps.

    num_draft_tokens per topk: the `num_draft_tokens` mapping when it names the topk,
    else the rule: topk=1 is a chain (num_steps+1, sglang forces it); a wider tree
    drafts its full size num_steps*topk+1, capped at `max_draft_tokens`.
    """

    algorithm: TreeAlgorithm = Field("EAGLE3", description="--speculative-algorithm.")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: PositiveInt = Field(3, description="--speculative-num-steps, fixed for the sweep.")
    topk: list[PositiveInt] = Field(
        [1, 2, 4], min_length=1, description="One variant per value (--speculative-eagle-topk)."
    )
    num_draft_tokens: dict[PositiveInt, PositiveInt] = Field(
        default_factory=dict,
        description="Per-topk --speculative-num-draft-tokens, e.g. {4: 8}; topks left out "
        "follow the rule (chain for topk=1, full tree capped at max_draft_tokens).",
    )
    max_draft_tokens: PositiveInt = Field(
        DEFAULT_MAX_DRAFT_TOKENS,
        ge=2,
        description="Cap of the rule's num_draft_tokens for topk > 1.",
    )
    spec_v2_topk1: bool = Field(
        False,
        description=f"Also run topk=1 on the overlap path ({SPEC_V2_ENV}=True), beside the "
        "plain topk=1 variant. For sglang versions that have the variable (e.g. 0.5.9); "
        "0.5.23 removed it (v2 is the only path there).",
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment for every variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @field_validator("topk")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"topk repeat: {v}")
        return sorted(v)

    @model_validator(mode="after")
    def _mapping_matches(self) -> TopkSweep:
        stray = sorted(set(self.num_draft_tokens) - set(self.topk))
        if stray:
            raise ValueError(
                f"num_draft_tokens names topk {stray} that are not in topk {self.topk}"
            )
        if self.spec_v2_topk1 and 1 not in self.topk:
            raise ValueError(
                "spec_v2_topk1 adds a spec v2 twin of the topk=1 variant; add 1 to topk "
                "(spec v2 only supports topk=1)"
            )
        return self

    def draft_tokens(self, topk: int) -> int:
        """num_draft_tokens for one topk: the mapping, else the documented rule."""
        if topk in self.num_draft_tokens:
            return self.num_draft_tokens[topk]
        return draft_tokens_rule(self.num_steps, topk, self.max_draft_tokens)


class GridSweep(_Model):
    """Baseline plus every (num_steps, topk) pair: the space a search explores.

    num_draft_tokens follows the topk sweep's rule: a chain (topk=1) drafts num_steps+1
    (sglang forces it); a tree drafts its full size num_steps*topk+1, capped at
    max_draft_tokens."""

    algorithm: TreeAlgorithm = Field("EAGLE3", description="--speculative-algorithm.")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: list[PositiveInt] = Field(
        [1, 2, 3, 4, 5, 6, 7, 8], min_length=1, description="--speculative-num-steps values."
    )
    topk: list[PositiveInt] = Field(
        [1, 2, 4], min_length=1, description="--speculative-eagle-topk values."
    )
    max_draft_tokens: PositiveInt = Field(
        DEFAULT_MAX_DRAFT_TOKENS, ge=2, description="Cap of a tree's num_draft_tokens."
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment for every variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @field_validator("num_steps", "topk")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"values repeat: {v}")
        return sorted(v)

    def draft_tokens(self, num_steps: int, topk: int) -> int | None:
        """None for a chain (sglang's forced num_steps+1), the capped full tree otherwise."""
        return None if topk == 1 else draft_tokens_rule(num_steps, topk, self.max_draft_tokens)


def _verify_shorthand(value: object) -> object:
    """`verify_policy: true` takes the defaults; false/null turns it off."""
    if value is True:
        return {}
    if value is False:
        return None
    return value


class PolicyVerification(_Model):
    """After the static variants: export the measured per-level answer as SGLang adaptive
    tiers, launch that config as one more variant and measure it at every level."""

    default_tiers: bool = Field(
        True,
        description="Also measure sglang's own default tiers (adaptive: true), so the "
        "verdict says what the export gains over the engine's defaults.",
    )
    pinned_zero: bool = Field(
        True,
        description="Before exporting, measure the engine's steps 0 (the chains' setup with "
        "every tier [0]): where the baseline wins a tier config runs that, which costs more "
        "than a server without speculation, so a chain may still beat it. One more launch.",
    )
    tolerance: float = Field(
        0.03,
        gt=0,
        lt=0.5,
        description="The exported config delivers when it reaches at least 1 - tolerance of "
        "the best a tier config can reach at every level.",
    )
    tie_margin: float = Field(
        0.01,
        ge=0,
        lt=0.5,
        description="Step counts within this relative margin of the best (or within the "
        "repeats' 2-sigma spread, if larger) are a near-tie, resolved to fewer steps.",
    )
    chains: list[str] = Field(
        default_factory=list,
        description="Variant names of the static topk-1 chains to export from; empty: every "
        "one the run measured (they must come from one family).",
    )


class SweepConfig(_Model):
    """One sweep: where, which server, what load, which variants."""

    name: str = Field("sweep", description="Free label recorded with the run.")
    target: Target = Field(default_factory=LocalTarget)
    server: ServerSpec
    load: LoadSpec = Field(default_factory=LoadSpec)
    results_dir: Annotated[Path | str, BeforeValidator(results_root_value)] = Field(
        Path("results"),
        description="Root of the Parquet results: a local path (a Path), or a pyarrow "
        "filesystem URI such as s3://bucket/prefix or file:///abs/path (kept a string; "
        "credentials come from the environment, never the URI).",
    )
    step_sweep: StepSweep | None = Field(
        None, description="Vary num_steps (the step-sweep flow runs this section)."
    )
    topk_sweep: TopkSweep | None = Field(
        None, description="Vary topk (the topk-sweep flow runs this section)."
    )
    grid_sweep: GridSweep | None = Field(
        None,
        description="Vary num_steps and topk together (the matrix-sweep flow runs it; "
        "with search: adaptive only what can change the answer is launched).",
    )
    algorithm_sweep: AlgorithmSweep | None = Field(
        None,
        description="Compare speculative algorithms: the baseline and, per enabled "
        "algorithm (eagle3, ngram, dflash, ...), its settings (the algorithm-sweep flow "
        "runs this section).",
    )
    variants: list[Variant] = Field(
        default_factory=list,
        description="Explicit variants; the matrix-sweep flow runs them after the sections.",
    )
    verify_policy: Annotated[
        PolicyVerification | None,
        BeforeValidator(_verify_shorthand),
        SchemaAlsoAccepts({"type": "boolean"}),
    ] = Field(
        None,
        description="true: after the variants, export the measured answer as SGLang "
        "adaptive tiers (sglang >= 0.5.11), launch it and verify it delivers the "
        "per-level best (see docs/adaptive.md).",
    )
    search: Annotated[
        SearchSpec,
        BeforeValidator(search_shorthand),
        SchemaAlsoAccepts({"type": "string", "enum": ["grid", "adaptive"]}),
    ] = Field(
        default_factory=SearchSpec,
        description="grid: launch every variant. adaptive: launch only the variants that "
        "can still beat the best measured at some level (see docs/search.md).",
    )
    stop_on_failure: bool = Field(
        False,
        description="Stop the sweep at the first failed variant (the rest are recorded as "
        "skipped). Default: record the failure and go on with the next variant.",
    )

    @property
    def speculative(self) -> bool:
        """Whether the sweep measures any speculative variant (the workload matters then)."""
        if self.step_sweep or self.topk_sweep or self.grid_sweep or self.algorithm_sweep:
            return True
        return any(not v.is_baseline for v in self.variants)

    @model_validator(mode="after")
    def _resolve_prompts(self) -> SweepConfig:
        """prompts 'auto' becomes what runs, so rows, reports and the UI say it: real text
        where acceptance decides the answer (speculation on real sglang), random elsewhere."""
        if self.load.prompts == "auto" and self.load.dataset is None:
            real = self.server.backend == "sglang" and self.speculative
            load = self.load.model_copy(update={"prompts": "builtin" if real else "random"})
            object.__setattr__(self, "load", load)  # a frozen model: resolved once, here
        return self

    @model_validator(mode="after")
    def _reachable_from_orchestrator(self) -> SweepConfig:
        t = self.target
        if (
            isinstance(t, SshTarget)
            and t.drive_from == "orchestrator"
            and self.server.host in LOOPBACK_HOSTS
            and t.host not in LOOPBACK_HOSTS
        ):
            raise ValueError(
                f"target.drive_from=orchestrator, but the server listens on {self.server.host} "
                f"of {t.host}, which this machine cannot reach: set server.host to 0.0.0.0 "
                "(or the host's address), or drive_from=target"
            )
        return self
