"""sglang 0.5.23's flags and argument rules for NGRAM, DFLASH, DSPARK, UNO and FROZEN_KV_MTP.

Read from 0.5.23's ``srt/arg_groups/fields/spec.py`` (flags, defaults) and
``srt/arg_groups/speculative_hook.py`` (``_handle_ngram``, ``_handle_dflash``,
``_handle_dspark``, ``_handle_uno``, ``_handle_frozen_kv_mtp``): the same errors (raised as
``ValueError`` with sglang's text) and the same overrides with sglang's warning lines, so a
variant the simulator runs is resolved as sglang would resolve it. What the simulator cannot
know is left out and said here: the draft checkpoint's config (DFLASH infers its block size
from it, else 16; DSPARK its gamma, else 7; a DSPARK draft bundled with the target), the
device (every check that needs CUDA passes), the Gemma-4 assistant draft that makes sglang
promote NEXTN/EAGLE to FROZEN_KV_MTP, and attention backends other than ``--attention-backend``.

Releases before 0.5.23 have none of these flags here (argparse's exit 2) and no algorithm
but EAGLE, EAGLE3, NEXTN, STANDALONE and NGRAM (specsweep gates the others at 0.5.23).
"""

from __future__ import annotations

import argparse
from typing import Any

# the 0.5.23 defaults (srt/arg_groups/fields/spec.py)
NGRAM_DEFAULTS: dict[str, Any] = {
    "speculative_ngram_min_bfs_breadth": 1,
    "speculative_ngram_max_bfs_breadth": 10,
    "speculative_ngram_match_type": "BFS",
    "speculative_ngram_max_trie_depth": 18,
    "speculative_ngram_capacity": 10 * 1000 * 1000,
    "speculative_ngram_external_corpus_path": None,
    "speculative_ngram_external_sam_budget": 0,
    "speculative_ngram_external_corpus_max_tokens": 10000000,
}
NGRAM_DEFAULT_DRAFT_TOKENS = 12
DFLASH_DEFAULT_BLOCK = 16  # what sglang uses when the draft config says nothing
DSPARK_DEFAULT_GAMMA = 7  # dspark_config.DEFAULT_DSPARK_GAMMA
MRR_RESET = 48
MRR_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. You can override this by "
    "explicitly setting --max-running-requests."
)


def add_flags(p: argparse.ArgumentParser) -> None:
    """The 0.5.23 flags of these algorithms (added only when simulating 0.5.23+)."""
    add = p.add_argument
    for name, default in NGRAM_DEFAULTS.items():
        flag = "--" + name.replace("_", "-")
        if name == "speculative_ngram_match_type":
            add(flag, type=str, default=default, choices=["BFS", "PROB"])
        elif name == "speculative_ngram_external_corpus_path":
            add(flag, type=str, default=default)
        else:
            add(flag, type=int, default=default)
    add("--speculative-dflash-block-size", type=int, default=None)
    add("--speculative-dspark-block-size", type=int, default=None)
    add("--uno-lora-path", type=str, default=None)


def _reset_mrr(args: dict[str, Any], warnings: list[str]) -> None:
    if args["max_running_requests"] is None:
        args["max_running_requests"] = MRR_RESET
        warnings.append(MRR_WARNING)


def _force_one(args: dict[str, Any], warnings: list[str], who: str) -> None:
    for key in ("speculative_num_steps", "speculative_eagle_topk"):
        value = args[key]
        if value is not None and int(value) != 1:
            warnings.append(f"{who} only supports {key} == 1; overriding {key}={value} to 1.")
        args[key] = 1


def resolve_ngram(args: dict[str, Any], warnings: list[str]) -> None:
    """``_handle_ngram`` (0.5.23): overlap stays as configured (its v2 worker has a relay)."""
    _reset_mrr(args, warnings)
    args["enable_mixed_chunk"] = False
    args["speculative_eagle_topk"] = args["speculative_ngram_max_bfs_breadth"]
    if args["speculative_num_draft_tokens"] is None:
        args["speculative_num_draft_tokens"] = NGRAM_DEFAULT_DRAFT_TOKENS
        warnings.append(
            "speculative_num_draft_tokens is set to 12 by default for ngram speculative "
            "decoding. You can override this by explicitly setting "
            "--speculative-num-draft-tokens."
        )
    draft = args["speculative_num_draft_tokens"]
    if args["speculative_num_steps"] is None:
        args["speculative_num_steps"] = draft // args["speculative_eagle_topk"]
    if args["speculative_ngram_external_corpus_path"] is not None:
        budget = args["speculative_ngram_external_sam_budget"]
        if budget <= 0:
            raise ValueError(
                "--speculative-ngram-external-sam-budget must be positive when "
                "--speculative-ngram-external-corpus-path is set."
            )
        if args["speculative_ngram_external_corpus_max_tokens"] <= 0:
            raise ValueError(
                "--speculative-ngram-external-corpus-max-tokens must be positive when "
                "--speculative-ngram-external-corpus-path is set."
            )
        if budget > draft - 1:
            raise ValueError(
                "speculative_ngram_external_sam_budget must be less than or equal to "
                f"speculative_num_draft_tokens - 1 ({draft - 1})."
            )
    warnings.append(
        "The mixed chunked prefill are disabled because of using ngram speculative decoding."
    )
    if args["enable_dp_attention"]:
        raise ValueError("Currently ngram speculative decoding does not support dp attention.")


def resolve_dflash(args: dict[str, Any], warnings: list[str]) -> None:
    if args["pp_size"] != 1:
        raise ValueError("Currently DFLASH speculative decoding only supports pp_size == 1.")
    if args["speculative_draft_model_path"] is None:
        raise ValueError(
            "DFLASH speculative decoding requires setting --speculative-draft-model-path."
        )
    _force_one(args, warnings, "DFLASH")
    block = args["speculative_dflash_block_size"]
    draft = args["speculative_num_draft_tokens"]
    if block is not None:
        if block <= 0:
            raise ValueError(
                f"DFLASH requires --speculative-dflash-block-size to be positive, got {block}."
            )
        if draft is not None and draft != block:
            raise ValueError(
                "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are "
                "set but they differ. For DFLASH they must match. "
                f"speculative_num_draft_tokens={draft}, speculative_dflash_block_size={block}."
            )
        args["speculative_num_draft_tokens"] = block
    elif draft is None:  # no draft config to read here: sglang's fallback
        args["speculative_num_draft_tokens"] = DFLASH_DEFAULT_BLOCK
        warnings.append("speculative_num_draft_tokens is not set; defaulting to 16 for DFLASH.")
    _reset_mrr(args, warnings)


def resolve_dspark(args: dict[str, Any], warnings: list[str]) -> None:
    if args["pp_size"] != 1:
        raise ValueError(
            "DSpark pipeline parallelism requires PD prefill; decode and non-disaggregated "
            "serving require pp_size == 1."
        )
    if args["speculative_draft_model_path"] is None:  # a bundled draft, as sglang assumes
        args["speculative_draft_model_path"] = args["model_path"]
    _force_one(args, warnings, "DSpark")
    gamma = args["speculative_dspark_block_size"]
    draft = args["speculative_num_draft_tokens"]
    if gamma is not None and gamma <= 0:
        raise ValueError(
            f"DSpark requires --speculative-dspark-block-size to be positive, got {gamma}."
        )
    if gamma is None and draft is None:
        gamma = DSPARK_DEFAULT_GAMMA
        warnings.append(f"DSpark gamma is not set; defaulting to {gamma}.")
    if gamma is not None:
        if draft is not None and draft != gamma + 1:
            raise ValueError(
                "DSpark speculative_num_draft_tokens must equal gamma + 1 "
                f"(= {gamma + 1} for gamma={gamma}), but got speculative_num_draft_tokens={draft}."
            )
        args["speculative_num_draft_tokens"] = gamma + 1
    if args["speculative_num_draft_tokens"] < 2:
        raise ValueError(
            "DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), "
            f"got {args['speculative_num_draft_tokens']}."
        )
    _reset_mrr(args, warnings)


def resolve_uno(args: dict[str, Any], warnings: list[str]) -> None:
    """``_handle_uno`` (no MRR reset there); the tree-mode bounds as sglang checks them."""
    if args["speculative_draft_model_path"] is not None:
        raise ValueError(
            "UNO reuses the target model and does not accept --speculative-draft-model-path."
        )
    if args["uno_lora_path"] is None:
        raise ValueError("UNO requires --uno-lora-path.")
    q = args["speculative_num_draft_tokens"]
    if q is None or q < 1:
        raise ValueError(
            "UNO requires --speculative-num-draft-tokens to be a positive integer denoting the "
            "linear width or tree verify width Q."
        )
    k = 1 if args["speculative_eagle_topk"] is None else args["speculative_eagle_topk"]
    if k < 1:
        raise ValueError(f"UNO requires --speculative-eagle-topk to be at least 1, got {k}.")
    if k > 1:
        _uno_tree(args, q, k)
    else:
        for key in ("speculative_num_steps", "speculative_eagle_topk"):
            if args[key] not in (None, 1):
                warnings.append(f"UNO uses {key}=1; overriding {args[key]}.")
        args["speculative_num_steps"] = args["speculative_eagle_topk"] = 1
    if (args["tp_size"], args["pp_size"]) != (1, 1):
        raise ValueError("UNO requires TP=PP=1.")
    if args["enable_dp_attention"]:
        raise ValueError("UNO does not support DP attention or context parallelism.")
    if args["enable_mixed_chunk"]:
        args["enable_mixed_chunk"] = False
        warnings.append("Mixed chunked prefill is disabled for UNO speculative decoding.")
    backend = args["attention_backend"] or "fa3"  # Hopper's default, the simulated GPU
    if backend != "fa3":
        raise ValueError(
            "UNO requires FA3 for both prefill and decode attention; "
            f"got prefill={backend!r}, decode={backend!r}."
        )


def _uno_tree(args: dict[str, Any], q: int, k: int) -> None:
    steps = args["speculative_num_steps"]
    if steps is None:
        raise ValueError(
            "UNO tree mode requires --speculative-num-steps so its draft width F can be "
            "derived as speculative_num_steps + 1."
        )
    if steps < 1:
        raise ValueError(
            f"UNO tree mode requires --speculative-num-steps to be positive, got {steps}."
        )
    f = steps + 1
    if q < f:
        raise ValueError(f"UNO tree mode requires Q >= F; got Q={q}, F={f}.")
    if q > 128:
        raise ValueError(f"UNO tree mode currently supports at most Q=128 verify nodes, got Q={q}.")
    if q * k > 2048:
        raise ValueError(f"UNO tree mode currently supports Q*K <= 2048; got Q*K={q}*{k}={q * k}.")
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
    if q - 1 > k * max(steps - 1, 0) + 1:
        raise ValueError(
            "UNO tree mode cannot represent the requested Q in EAGLE's parent-list ABI: "
            f"Q-1={q - 1} exceeds K*(F-2)+1={k * max(steps - 1, 0) + 1} for F={f}, K={k}."
        )


def resolve_frozen_kv_mtp(args: dict[str, Any], warnings: list[str]) -> None:
    """``_handle_frozen_kv_mtp``: the MRR reset and mixed chunk off; nothing picks num_steps,
    topk or draft tokens for it (its worker reads them), so unset ones fail here."""
    _reset_mrr(args, warnings)
    if args["enable_mixed_chunk"]:
        args["enable_mixed_chunk"] = False
        warnings.append(
            "Mixed chunked prefill is disabled because of using Frozen-KV MTP speculative decoding."
        )
    needed = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    missing = [key for key in needed if args[key] is None]
    if missing:
        raise ValueError(f"FROZEN_KV_MTP needs {', '.join(missing)} (its worker reads them)")


RESOLVERS = {
    "NGRAM": resolve_ngram,
    "DFLASH": resolve_dflash,
    "DSPARK": resolve_dspark,
    "UNO": resolve_uno,
    "FROZEN_KV_MTP": resolve_frozen_kv_mtp,
}
