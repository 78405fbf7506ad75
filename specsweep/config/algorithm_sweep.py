"""The algorithm sweep's section: the baseline plus, per algorithm the user enables, its
settings (one or a small grid), so the answer says which algorithm wins at which
concurrency. Each algorithm's rules are the variant's (config/variant.py,
config/algorithms.py); this section only lists what to run."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from specsweep.config.common import EnvMap, ExtraArgs, PositiveInt, _Model

DEFAULT_MAX_DRAFT_TOKENS = 16


def _distinct(values: list[int]) -> list[int]:
    if len(set(values)) != len(values):
        raise ValueError(f"values repeat: {values}")
    return sorted(values)


# One variant per value: distinct, sorted.
Values = Annotated[list[PositiveInt], AfterValidator(_distinct)]


class TreeGrid(_Model):
    """A tree-drafting algorithm (EAGLE, EAGLE3, NEXTN, STANDALONE, FROZEN_KV_MTP): one
    variant per num_steps at one topk."""

    draft_model_path: str | None = Field(
        None, description="--speculative-draft-model-path (NEXTN may leave it out)."
    )
    num_steps: Values = Field(
        [3], min_length=1, description="One variant per value (--speculative-num-steps)."
    )
    topk: PositiveInt = Field(1, description="--speculative-eagle-topk for every variant.")
    max_draft_tokens: PositiveInt = Field(
        DEFAULT_MAX_DRAFT_TOKENS,
        ge=2,
        description="topk > 1: the tree's draft tokens, num_steps*topk+1 capped here.",
    )


class NgramGrid(_Model):
    """NGRAM (no draft model): one variant per (num_draft_tokens, max_bfs_breadth)."""

    num_draft_tokens: Values = Field(
        [12], min_length=1, description="--speculative-num-draft-tokens values (sglang: 12)."
    )
    max_bfs_breadth: Values = Field(
        [10], min_length=1, description="--speculative-ngram-max-bfs-breadth values (10)."
    )
    match_type: Literal["BFS", "PROB"] = Field("BFS", description="--speculative-ngram-match-type.")
    external_corpus_path: str | None = Field(
        None, description="--speculative-ngram-external-corpus-path (a JSONL corpus)."
    )
    external_sam_budget: int = Field(
        0, ge=0, description="--speculative-ngram-external-sam-budget (with a corpus)."
    )


class DflashGrid(_Model):
    """DFLASH: one variant per block size (the verify window)."""

    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    block_size: Values = Field(
        [16], min_length=1, description="--speculative-dflash-block-size values."
    )


class DsparkGrid(_Model):
    """DSPARK: one variant per gamma (drafts per block; the verify window is gamma + 1)."""

    draft_model_path: str | None = Field(
        None, description="--speculative-draft-model-path (empty: bundled with the target)."
    )
    block_size: Values = Field(
        [7], min_length=1, description="--speculative-dspark-block-size values (gamma)."
    )


class UnoGrid(_Model):
    """UNO (the target drafts with a LoRA): one chain variant per verify width Q."""

    uno_lora_path: str | None = Field(None, description="--uno-lora-path (required).")
    num_draft_tokens: Values = Field(
        [4], min_length=1, description="--speculative-num-draft-tokens values (Q)."
    )


TREE_KEYS = ("eagle", "eagle3", "nextn", "standalone", "frozen_kv_mtp")


class AlgorithmSweep(_Model):
    """Baseline plus, per enabled algorithm (a section set, even empty: `ngram: {}`), its
    settings: which algorithm wins at which concurrency."""

    eagle3: TreeGrid | None = Field(None, description="EAGLE3: draft model, steps, topk.")
    ngram: NgramGrid | None = Field(None, description="NGRAM: draft tokens, BFS breadth, corpus.")
    dflash: DflashGrid | None = Field(None, description="DFLASH: draft model, block sizes.")
    eagle: TreeGrid | None = Field(None, description="EAGLE: draft model, steps, topk.")
    nextn: TreeGrid | None = Field(None, description="NEXTN (MTP heads; sglang's EAGLE alias).")
    standalone: TreeGrid | None = Field(None, description="STANDALONE: a small draft LM.")
    frozen_kv_mtp: TreeGrid | None = Field(None, description="FROZEN_KV_MTP: MTP over frozen KV.")
    dspark: DsparkGrid | None = Field(None, description="DSPARK: draft model, gammas.")
    uno: UnoGrid | None = Field(None, description="UNO: LoRA path, verify widths.")
    env: EnvMap = Field(default_factory=dict, description="Extra environment for every variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @model_validator(mode="after")
    def _something_enabled(self) -> AlgorithmSweep:
        if not self.enabled:
            raise ValueError(
                "enable at least one algorithm: set its section, e.g. ngram: {} for sglang's "
                "defaults"
            )
        return self

    @property
    def enabled(self) -> list[str]:
        """The enabled algorithms' keys, in the order the sweep runs them."""
        order = ("eagle", "eagle3", "nextn", "standalone", "frozen_kv_mtp", "ngram", "dflash")
        return [k for k in (*order, "dspark", "uno") if getattr(self, k) is not None]
