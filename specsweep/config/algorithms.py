"""The speculative algorithms that are not EAGLE-style trees: their parameters, sglang's
rules for them, their argv and their names.

Read from sglang 0.5.23 (``srt/speculative/spec_info.py``, ``srt/arg_groups/fields/spec.py``
for the flags and defaults, ``srt/arg_groups/speculative_hook.py`` for the rules:
``_handle_ngram``, ``_handle_dflash``, ``_handle_dspark``, ``_handle_uno``,
``_handle_frozen_kv_mtp``). Where sglang raises, specsweep refuses with sglang's reason;
where sglang overrides a value (with a warning or silently) or infers one from the draft
checkpoint, specsweep refuses the value and asks for the one that runs, so a variant's name
always says what the server measured.

EAGLE, EAGLE3, NEXTN (sglang's alias of EAGLE), STANDALONE and FROZEN_KV_MTP draft a tree of
``num_steps`` x ``topk`` with ``num_draft_tokens`` verified; their rules stay in
``config/variant.py``. NEXTN (or EAGLE) with a Gemma-4 assistant draft is promoted by sglang
to FROZEN_KV_MTP (``_resolve_speculative_algorithm_alias``); specsweep cannot read the
draft's architecture before the launch, so name FROZEN_KV_MTP yourself for such a draft.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal, Protocol

from pydantic import Field, field_validator

from specsweep.config.common import PositiveInt, _check_path_value, _Model

TREE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "FROZEN_KV_MTP")
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")
# _handle_ngram: "speculative_num_draft_tokens is set to 12 by default for ngram".
NGRAM_DEFAULT_DRAFT_TOKENS = 12
# UNO tree mode's limits (_handle_uno).
UNO_MAX_VERIFY_WIDTH = 128
UNO_MAX_FRONTIER_SLOTS = 2048


class NgramSettings(_Model):
    """NGRAM's own flags (``--speculative-ngram-*``), with sglang 0.5.23's defaults."""

    min_bfs_breadth: PositiveInt = Field(1, description="--speculative-ngram-min-bfs-breadth.")
    max_bfs_breadth: PositiveInt = Field(
        10,
        description="--speculative-ngram-max-bfs-breadth; sglang also makes it the topk.",
    )
    match_type: Literal["BFS", "PROB"] = Field("BFS", description="--speculative-ngram-match-type.")
    max_trie_depth: PositiveInt = Field(18, description="--speculative-ngram-max-trie-depth.")
    capacity: PositiveInt = Field(10_000_000, description="--speculative-ngram-capacity.")
    external_corpus_path: str | None = Field(
        None, description="--speculative-ngram-external-corpus-path (a JSONL corpus)."
    )
    external_sam_budget: Annotated[int, Field(ge=0)] = Field(
        0,
        description="--speculative-ngram-external-sam-budget (draft nodes for the corpus; "
        "positive with a corpus, at most num_draft_tokens - 1).",
    )
    external_corpus_max_tokens: Annotated[int, Field(ge=0)] = Field(
        10_000_000, description="--speculative-ngram-external-corpus-max-tokens."
    )

    @field_validator("external_corpus_path")
    @classmethod
    def _corpus_is_a_value(cls, v: str | None) -> str | None:
        return v if v is None else _check_path_value("ngram.external_corpus_path", v)

    def args(self) -> list[str]:
        """Every ngram flag, explicit (the name says them all); the corpus ones with a corpus."""
        argv = [
            "--speculative-ngram-min-bfs-breadth",
            str(self.min_bfs_breadth),
            "--speculative-ngram-max-bfs-breadth",
            str(self.max_bfs_breadth),
            "--speculative-ngram-match-type",
            self.match_type,
            "--speculative-ngram-max-trie-depth",
            str(self.max_trie_depth),
            "--speculative-ngram-capacity",
            str(self.capacity),
        ]
        if self.external_corpus_path is not None:
            argv += [
                "--speculative-ngram-external-corpus-path",
                self.external_corpus_path,
                "--speculative-ngram-external-sam-budget",
                str(self.external_sam_budget),
                "--speculative-ngram-external-corpus-max-tokens",
                str(self.external_corpus_max_tokens),
            ]
        return argv

    def name_suffix(self) -> str:
        """What differs from sglang's defaults: ``-m<min breadth>``, ``-prob``,
        ``-t<trie depth>``, ``-cap<capacity>``, and with a corpus ``-corpus`` + 6 hex digits
        of its path's sha256, ``-sam<budget>`` (and ``-ct<max tokens>``)."""
        default = NgramSettings()
        part = ""
        if self.min_bfs_breadth != default.min_bfs_breadth:
            part += f"-m{self.min_bfs_breadth}"
        if self.match_type != default.match_type:
            part += f"-{self.match_type.lower()}"
        if self.max_trie_depth != default.max_trie_depth:
            part += f"-t{self.max_trie_depth}"
        if self.capacity != default.capacity:
            part += f"-cap{self.capacity}"
        if self.external_corpus_path is not None:
            digest = hashlib.sha256(self.external_corpus_path.encode()).hexdigest()[:6]
            part += f"-corpus{digest}-sam{self.external_sam_budget}"
            if self.external_corpus_max_tokens != default.external_corpus_max_tokens:
                part += f"-ct{self.external_corpus_max_tokens}"
        return part


class Variant(Protocol):
    """What these rules read of a variant (config/variant.py's Variant)."""

    algorithm: str | None
    draft_model_path: str | None
    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None
    block_size: int | None
    ngram: NgramSettings | None
    uno_lora_path: str | None
    spec_v2: bool

    @property
    def resolved_ngram(self) -> NgramSettings: ...

    @property
    def resolved_num_draft_tokens(self) -> int | None: ...


def _only_one(v: Variant, field: str, algorithm: str, why: str) -> None:
    """sglang overrides num_steps/topk other than 1 (with a warning) for this algorithm."""
    value = getattr(v, field)
    if value not in (None, 1):
        flag = "speculative_num_steps" if field == "num_steps" else "speculative_eagle_topk"
        raise ValueError(
            f"{algorithm} only supports {flag} == 1; sglang overrides {field}={value} to 1 "
            f"({why}). Leave {field} out"
        )


def check_foreign_fields(v: Variant) -> None:
    """Fields of one algorithm set on another (sglang would ignore them)."""
    algo = v.algorithm
    if v.block_size is not None and algo not in BLOCK_ALGORITHMS:
        raise ValueError(
            f"block_size is DFLASH's --speculative-dflash-block-size or DSPARK's "
            f"--speculative-dspark-block-size; algorithm {algo} ignores it. Remove it"
        )
    if v.ngram is not None and algo != "NGRAM":
        raise ValueError(f"ngram settings are for algorithm NGRAM; {algo} ignores them")
    if v.uno_lora_path is not None and algo != "UNO":
        raise ValueError(f"uno_lora_path (--uno-lora-path) is for algorithm UNO; {algo} ignores it")
    if algo not in TREE_ALGORITHMS and v.spec_v2:
        raise ValueError(
            f"spec_v2 selects the EAGLE worker's overlap path ({algo} has its own worker); "
            "remove it"
        )


def check_ngram(v: Variant) -> None:
    """``_handle_ngram``: topk becomes max_bfs_breadth (silently), draft tokens default to 12
    (warning), num_steps is derived (draft tokens // topk), the corpus needs a positive
    budget of at most draft tokens - 1 and a positive token cap."""
    ngram = v.resolved_ngram
    if v.draft_model_path is not None:
        raise ValueError(
            "NGRAM drafts from n-gram matches of the context (and an external corpus), with "
            "no draft model; sglang ignores draft_model_path. Remove it"
        )
    if v.topk is not None:
        raise ValueError(
            f"NGRAM: sglang sets speculative_eagle_topk to --speculative-ngram-max-bfs-breadth "
            f"({ngram.max_bfs_breadth}) whatever topk says; set ngram.max_bfs_breadth "
            "instead of topk"
        )
    if v.num_steps is not None:
        raise ValueError(
            "NGRAM: sglang derives speculative_num_steps from num_draft_tokens // "
            "max_bfs_breadth; leave num_steps out and set num_draft_tokens"
        )
    if ngram.min_bfs_breadth > ngram.max_bfs_breadth:
        raise ValueError(
            f"ngram.min_bfs_breadth={ngram.min_bfs_breadth} exceeds max_bfs_breadth="
            f"{ngram.max_bfs_breadth}"
        )
    draft = v.resolved_num_draft_tokens
    assert draft is not None
    if ngram.external_corpus_path is None:
        if ngram.external_sam_budget:
            raise ValueError(
                "ngram.external_sam_budget reserves draft nodes for an external corpus; set "
                "ngram.external_corpus_path or remove the budget"
            )
        return
    if ngram.external_sam_budget <= 0:
        raise ValueError(
            "--speculative-ngram-external-sam-budget must be positive when "
            "--speculative-ngram-external-corpus-path is set (sglang refuses it): set "
            "ngram.external_sam_budget"
        )
    if ngram.external_corpus_max_tokens <= 0:
        raise ValueError(
            "--speculative-ngram-external-corpus-max-tokens must be positive when "
            "--speculative-ngram-external-corpus-path is set (sglang refuses it)"
        )
    if ngram.external_sam_budget > draft - 1:
        raise ValueError(
            "speculative_ngram_external_sam_budget must be less than or equal to "
            f"speculative_num_draft_tokens - 1 ({draft - 1}) (sglang refuses it); got "
            f"{ngram.external_sam_budget}"
        )


def check_block(v: Variant) -> None:
    """``_handle_dflash`` / ``_handle_dspark``: num_steps and topk are forced to 1 (warning);
    the block size is inferred from the draft checkpoint when unset (16 for DFLASH, 7 for
    DSPARK when the checkpoint says nothing), so specsweep asks for it; draft tokens must
    match it (DFLASH: the block; DSPARK: gamma + 1)."""
    algo = v.algorithm
    assert algo is not None
    why = "its natural unit is the block (block_size)"
    _only_one(v, "num_steps", algo, why)
    _only_one(v, "topk", algo, why)
    if algo == "DFLASH" and v.draft_model_path is None:
        raise ValueError(
            "DFLASH speculative decoding requires setting --speculative-draft-model-path: set "
            "draft_model_path"
        )
    if v.block_size is None:
        inferred = "16" if algo == "DFLASH" else "7 (gamma)"
        raise ValueError(
            f"{algo} needs block_size: unset, sglang infers it from the draft checkpoint "
            f"(else {inferred}), and the variant would not say what ran"
        )
    expected = v.resolved_num_draft_tokens
    if v.num_draft_tokens is not None and v.num_draft_tokens != expected:
        if algo == "DFLASH":
            raise ValueError(
                "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are "
                "set but they differ. For DFLASH they must match. "
                f"speculative_num_draft_tokens={v.num_draft_tokens}, "
                f"speculative_dflash_block_size={v.block_size}. Leave num_draft_tokens out"
            )
        raise ValueError(
            "DSpark speculative_num_draft_tokens must equal gamma + 1 "
            f"(= {expected} for gamma={v.block_size}), but got "
            f"speculative_num_draft_tokens={v.num_draft_tokens}. Leave num_draft_tokens out"
        )


def check_uno(v: Variant) -> None:
    """``_handle_uno``: no draft model (it reuses the target with a LoRA), a LoRA path, a
    verify width Q (num_draft_tokens); chain mode (topk 1) forces num_steps and topk to 1
    (warning); tree mode (topk > 1) needs num_steps and sglang's bounds on Q, K and F."""
    if v.draft_model_path is not None:
        raise ValueError(
            "UNO reuses the target model and does not accept --speculative-draft-model-path: "
            "remove draft_model_path"
        )
    if v.uno_lora_path is None:
        raise ValueError("UNO requires --uno-lora-path: set uno_lora_path")
    q = v.num_draft_tokens
    if q is None:
        raise ValueError(
            "UNO requires --speculative-num-draft-tokens to be a positive integer denoting the "
            "linear width or tree verify width Q: set num_draft_tokens"
        )
    k = v.topk or 1
    if k == 1:
        _only_one(v, "num_steps", "UNO", "its chain mode drafts one step")
        return
    if v.num_steps is None:
        raise ValueError(
            "UNO tree mode requires --speculative-num-steps so its draft width F can be "
            "derived as speculative_num_steps + 1: set num_steps"
        )
    steps = v.num_steps
    if steps < 1:
        raise ValueError(
            f"UNO tree mode requires --speculative-num-steps to be positive, got {steps}."
        )
    f = steps + 1
    if q < f:
        raise ValueError(f"UNO tree mode requires Q >= F; got Q={q}, F={f}.")
    if q > UNO_MAX_VERIFY_WIDTH:
        raise ValueError(
            f"UNO tree mode currently supports at most Q={UNO_MAX_VERIFY_WIDTH} verify nodes, "
            f"got Q={q}."
        )
    if q * k > UNO_MAX_FRONTIER_SLOTS:
        raise ValueError(
            f"UNO tree mode currently supports Q*K <= {UNO_MAX_FRONTIER_SLOTS}; got "
            f"Q*K={q}*{k}={q * k}."
        )
    capacity, nodes = 1, 1
    for _ in range(steps):
        nodes *= k
        capacity += nodes
        if capacity >= q:
            break
    if q > capacity:
        raise ValueError(
            "UNO tree mode cannot build the requested Q from F and K: "
            f"Q={q} exceeds capacity={capacity} for F={f}, K={k}."
        )
    parent = k * max(steps - 1, 0) + 1
    if q - 1 > parent:
        raise ValueError(
            "UNO tree mode cannot represent the requested Q in EAGLE's parent-list ABI: "
            f"Q-1={q - 1} exceeds K*(F-2)+1={parent} for F={f}, K={k}."
        )


def check_non_tree(v: Variant) -> None:
    """The rules of NGRAM, DFLASH, DSPARK and UNO (sglang's, before launch)."""
    if v.algorithm == "NGRAM":
        check_ngram(v)
    elif v.algorithm in BLOCK_ALGORITHMS:
        check_block(v)
    elif v.algorithm == "UNO":
        check_uno(v)


def resolved(v: Variant) -> tuple[int | None, int | None, int | None]:
    """(num_steps, topk, num_draft_tokens) as sglang resolves them for a non-tree algorithm."""
    if v.algorithm == "NGRAM":
        topk = v.resolved_ngram.max_bfs_breadth
        draft = v.num_draft_tokens or NGRAM_DEFAULT_DRAFT_TOKENS
        return draft // topk, topk, draft
    if v.algorithm == "DFLASH":
        return 1, 1, v.block_size
    if v.algorithm == "DSPARK":
        return 1, 1, None if v.block_size is None else v.block_size + 1
    if v.algorithm == "UNO":
        k = v.topk or 1
        return (v.num_steps if k > 1 else 1), k, v.num_draft_tokens
    raise AssertionError(v.algorithm)


def launch_args(v: Variant) -> list[str]:
    """The algorithm's own flags after ``--speculative-algorithm`` (and the draft path)."""
    if v.algorithm == "NGRAM":
        draft = v.resolved_num_draft_tokens
        return ["--speculative-num-draft-tokens", str(draft), *v.resolved_ngram.args()]
    if v.algorithm == "DFLASH":
        return ["--speculative-dflash-block-size", str(v.block_size)]
    if v.algorithm == "DSPARK":
        return ["--speculative-dspark-block-size", str(v.block_size)]
    if v.algorithm == "UNO":
        assert v.uno_lora_path is not None
        argv = ["--uno-lora-path", v.uno_lora_path]
        argv += ["--speculative-num-draft-tokens", str(v.num_draft_tokens)]
        if (v.topk or 1) > 1:
            argv += ["--speculative-num-steps", str(v.num_steps)]
            argv += ["--speculative-eagle-topk", str(v.topk)]
        return argv
    raise AssertionError(v.algorithm)


def label(v: Variant) -> str:
    """``ngram-w10-d12`` (max BFS breadth, draft tokens, then what differs from sglang's
    ngram defaults), ``dflash-b16`` (the block), ``dspark-b7`` (gamma), ``uno-d4`` (chain:
    the verify width) or ``uno-s3-k2-d4`` (tree)."""
    if v.algorithm == "NGRAM":
        ngram = v.resolved_ngram
        draft = v.resolved_num_draft_tokens
        return f"ngram-w{ngram.max_bfs_breadth}-d{draft}{ngram.name_suffix()}"
    if v.algorithm in BLOCK_ALGORITHMS:
        assert v.algorithm is not None
        return f"{v.algorithm.lower()}-b{v.block_size}"
    if v.algorithm == "UNO":
        if (v.topk or 1) > 1:
            return f"uno-s{v.num_steps}-k{v.topk}-d{v.num_draft_tokens}"
        return f"uno-d{v.num_draft_tokens}"
    raise AssertionError(v.algorithm)
