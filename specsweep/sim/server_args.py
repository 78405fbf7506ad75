"""sglang's command line and its speculative-decoding argument rules, for the simulator.

The simulator must accept exactly what ``python -m sglang.launch_server`` accepts (same
flag names, aliases, defaults; unknown flags exit 2 with a usage line) and resolve the
speculative settings the way sglang 0.5.9's ``ServerArgs._handle_speculative_decoding``
does, because specsweep's own validation is tested against this behaviour:

* NEXTN is an alias of EAGLE;
* speculation with ``--max-running-requests`` unset resets it to 48 (warning);
* ``SGLANG_ENABLE_SPEC_V2`` true turns the overlap scheduler on, and an explicit
  ``--speculative-eagle-topk`` > 1 then raises ``ValueError``; otherwise speculation
  runs without the overlap scheduler (v1);
* ``--speculative-num-steps`` unset while topk or draft tokens are set fails with a
  bare ``AssertionError``; all three unset picks (3, 1, 4);
* topk == 1 forces ``num_draft_tokens = num_steps + 1`` (warning).

From 0.5.23 (as simulated), NGRAM follows 0.5.23's ``_handle_ngram`` and FROZEN_KV_MTP,
DFLASH, DSPARK and UNO exist, each resolved by ``specsweep.sim.algorithms`` (sglang's
errors, overrides and warnings for each).

The release simulated (``SPECSWEEP_SIM_SGLANG_VERSION``, ``specsweep.sim.version``)
decides whether ``--speculative-adaptive`` and ``--speculative-adaptive-config`` exist
(0.5.11+); with them, sglang 0.5.23's adaptive rules run first (``specsweep.sim.adaptive``:
the fallback to static params with its warning, or the config loaded, topk 1, steps the
middle of the candidates, draft tokens steps + 1, steps 0 allowed). Everything else keeps
the 0.5.9 rules above for every release, ``SGLANG_ENABLE_SPEC_V2`` included (it no longer
exists in 0.5.23, where overlap is the default; the simulator keeps one switch for all).
As in sglang, an unset ``--cuda-graph-max-bs`` (256) is lowered to an explicit
``--max-running-requests`` below it.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any

from specsweep.sim import algorithms
from specsweep.sim.adaptive import resolve_adaptive_args
from specsweep.sim.perf_model import SpecConfig
from specsweep.sim.version import (
    DEFAULT_SGLANG_VERSION,
    has_0523_algorithms,
    has_adaptive_flags,
    simulated_version,
)

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SPEC_ALGORITHMS_0523 = (*SPEC_ALGORITHMS, "FROZEN_KV_MTP", "DFLASH", "DSPARK", "UNO")
AUTO_SPEC_PARAMS = (3, 1, 4)
SPEC_RESET_MAX_RUNNING_REQUESTS = 48
NGRAM_MAX_BFS_BREADTH = 10
NGRAM_MAX_MATCH_WINDOW_SIZE = 12
ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "cutlass_mla", "fa3", "fa4", "flashinfer",
    "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave",
    "intel_amx", "ascend",
)  # fmt: skip
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")

MAX_RUNNING_RESET_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. You can override "
    "this by explicitly setting --max-running-requests."
)
DRAFT_TOKENS_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)
SPEC_V2_TOPK_ERROR = "Spec v2 currently only supports topk = 1 for speculative decoding."


def build_parser(version: str = DEFAULT_SGLANG_VERSION) -> argparse.ArgumentParser:
    """sglang's launch_server parser as of ``version``, restricted to the flags the
    simulator knows."""
    p = argparse.ArgumentParser(prog="launch_server.py")
    add = p.add_argument
    add("--model-path", "--model", dest="model_path", type=str, required=True)
    add("--tokenizer-path", type=str, default=None)
    add("--revision", type=str, default=None)
    add("--served-model-name", type=str, default=None)
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    add("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    add("--ep-size", "--ep", dest="ep_size", type=int, default=1)
    add("--pp-size", "--pp", dest="pp_size", type=int, default=1)
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr", type=str, default=None)
    add("--trust-remote-code", action="store_true")
    add("--dtype", type=str, default="auto", choices=DTYPES)
    add("--kv-cache-dtype", type=str, default="auto")
    add("--quantization", type=str, default=None)
    add("--load-format", type=str, default="auto")
    add("--context-length", type=int, default=None)
    add("--mem-fraction-static", type=float, default=None)
    add("--max-running-requests", type=int, default=None)
    add("--max-total-tokens", type=int, default=None)
    add("--max-prefill-tokens", type=int, default=16384)
    add("--chunked-prefill-size", type=int, default=None)
    add("--page-size", type=int, default=None)
    add("--schedule-policy", type=str, default="fcfs")
    add("--schedule-conservativeness", type=float, default=1.0)
    add("--cuda-graph-max-bs", type=int, default=None)
    add("--cuda-graph-bs", type=int, nargs="+", default=None)
    add("--disable-cuda-graph", action="store_true")
    add("--disable-radix-cache", action="store_true")
    add("--disable-overlap-schedule", action="store_true")
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-mixed-chunk", action="store_true")
    add("--enable-torch-compile", action="store_true")
    add("--enable-dp-attention", action="store_true")
    add("--enable-metrics", action="store_true")
    add("--skip-server-warmup", action="store_true")
    add("--stream-interval", type=int, default=1)
    add("--stream-output", action="store_true")
    add("--random-seed", type=int, default=None)
    add("--watchdog-timeout", type=float, default=300)
    add("--log-level", type=str, default="info")
    add("--log-level-http", type=str, default=None)
    add("--log-requests", action="store_true")
    add("--decode-log-interval", type=int, default=40)
    add("--api-key", type=str, default=None)
    add("--attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    new_algorithms = has_0523_algorithms(version)
    choices = SPEC_ALGORITHMS_0523 if new_algorithms else SPEC_ALGORITHMS
    add("--speculative-algorithm", type=str, default=None, choices=choices)
    add("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None)
    add("--speculative-draft-model-revision", type=str, default=None)
    add("--speculative-num-steps", type=int, default=None)
    add("--speculative-eagle-topk", type=int, default=None)
    add("--speculative-num-draft-tokens", type=int, default=None)
    add("--speculative-accept-threshold-single", type=float, default=1.0)
    add("--speculative-accept-threshold-acc", type=float, default=1.0)
    add("--speculative-token-map", type=str, default=None)
    add("--speculative-attention-mode", type=str, default="prefill", choices=["prefill", "decode"])
    if has_adaptive_flags(version):
        add("--speculative-adaptive", action="store_true")
        add("--speculative-adaptive-config", type=str, default=None)
    if new_algorithms:
        algorithms.add_flags(p)
    return p


def parse_args(argv: Sequence[str], version: str = DEFAULT_SGLANG_VERSION) -> argparse.Namespace:
    """Parse like sglang ``version``: a bad or unknown flag prints usage, exits 2."""
    return build_parser(version).parse_args(list(argv))


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """sglang's boolean environment variables: true/1/yes, any case."""
    return (env.get(name) or "").strip().lower() in ("true", "1", "yes", "y")


def resolve_server_args(
    ns: argparse.Namespace, env: Mapping[str, str] | None = None, version: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Apply sglang's post-init rules; return (resolved args, warning lines).

    Raises AssertionError (bare, as sglang) or ValueError exactly where sglang does (and
    json's or the OS's error for an unreadable adaptive config). ``version`` defaults to
    the one ``env`` selects.
    """
    env = os.environ if env is None else env
    version = version or simulated_version(env)
    args = dict(vars(ns))
    warnings: list[str] = []
    args["tokenizer_path"] = args["tokenizer_path"] or args["model_path"]
    args["served_model_name"] = args["served_model_name"] or args["model_path"]
    if args["random_seed"] is None:
        args["random_seed"] = random.randint(0, 1 << 30)
    if args["mem_fraction_static"] is None:
        args["mem_fraction_static"] = 0.88 if args["speculative_algorithm"] is None else 0.85
    if args["chunked_prefill_size"] is None:
        args["chunked_prefill_size"] = 8192
    if args["cuda_graph_max_bs"] is None:
        mrr = args["max_running_requests"]
        args["cuda_graph_max_bs"] = 256 if mrr is None or mrr >= 256 else mrr
    if args["page_size"] is None:
        args["page_size"] = 1
    if args["stream_interval"] < 1:
        raise ValueError("stream_interval must be a positive integer")

    algo = args["speculative_algorithm"]
    if algo == "NEXTN":
        algo = args["speculative_algorithm"] = "EAGLE"
    resolve_adaptive_args(args, version, env_flag(env, "SGLANG_ENABLE_SPEC_V2"), warnings)
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        _resolve_eagle(args, env, warnings)
    elif algo in algorithms.RESOLVERS and has_0523_algorithms(version):
        algorithms.RESOLVERS[algo](args, warnings)
    elif algo == "NGRAM":
        if args["max_running_requests"] is None:
            args["max_running_requests"] = SPEC_RESET_MAX_RUNNING_REQUESTS
            warnings.append(MAX_RUNNING_RESET_WARNING)
        args["disable_overlap_schedule"] = True
        args["speculative_eagle_topk"] = NGRAM_MAX_BFS_BREADTH
        if args["speculative_num_draft_tokens"] is None:
            args["speculative_num_draft_tokens"] = NGRAM_MAX_MATCH_WINDOW_SIZE
        warnings.append(
            "The overlap scheduler and mixed chunked prefill are disabled because of "
            "using ngram speculative decoding."
        )
    return args, warnings


def _resolve_eagle(args: dict[str, Any], env: Mapping[str, str], warnings: list[str]) -> None:
    if args["max_running_requests"] is None:
        args["max_running_requests"] = SPEC_RESET_MAX_RUNNING_REQUESTS
        warnings.append(MAX_RUNNING_RESET_WARNING)
    if env_flag(env, "SGLANG_ENABLE_SPEC_V2"):
        args["disable_overlap_schedule"] = False
        warnings.append(
            "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap "
            "schedule is turned on."
        )
        topk = args["speculative_eagle_topk"]
        if topk is not None and topk > 1:
            raise ValueError(SPEC_V2_TOPK_ERROR)
    else:
        args["disable_overlap_schedule"] = True
        warnings.append(
            "Overlap scheduler is disabled when spec v2 is off or using unsupported "
            "speculative algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable "
            "the experimental overlap scheduler. "
        )
    if args["enable_mixed_chunk"]:
        args["enable_mixed_chunk"] = False
        warnings.append(
            "Mixed chunked prefill is disabled because of using eagle speculative decoding."
        )
    if args["speculative_num_steps"] is None:
        topk_unset = args["speculative_eagle_topk"] is None
        assert topk_unset and args["speculative_num_draft_tokens"] is None
        (
            args["speculative_num_steps"],
            args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"],
        ) = AUTO_SPEC_PARAMS
    if args["speculative_eagle_topk"] is None:  # sglang would fail later on a None compare
        raise ValueError("speculative_eagle_topk must be set together with speculative_num_steps")
    if (
        args["speculative_eagle_topk"] == 1
        and args["speculative_num_draft_tokens"] != args["speculative_num_steps"] + 1
    ):
        warnings.append(DRAFT_TOKENS_WARNING)
        args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1
    if args["speculative_num_draft_tokens"] is None:
        raise ValueError(
            "speculative_num_draft_tokens must be set together with speculative_num_steps"
        )
    if args.get("speculative_adaptive"):
        return  # steps 0 (no drafting, 1 draft token) is a valid adaptive candidate
    if args["speculative_num_steps"] < 1 or args["speculative_eagle_topk"] < 1:
        raise ValueError("speculative_num_steps and speculative_eagle_topk must be >= 1")
    if args["speculative_num_draft_tokens"] < 2:
        raise ValueError("speculative_num_draft_tokens must be >= 2")


def spec_config_from_args(args: Mapping[str, Any]) -> SpecConfig | None:
    """The perf model's view of resolved args; None for the baseline."""
    algo = args.get("speculative_algorithm")
    if algo is None:
        return None
    ndt = int(args["speculative_num_draft_tokens"])
    overlap = not args.get("disable_overlap_schedule", False)
    if algo == "NGRAM":  # topk: the BFS breadth; steps: not a draft depth
        topk = int(args["speculative_eagle_topk"] or 1)
        return SpecConfig("NGRAM", max(ndt - 1, 1), topk, ndt, overlap=overlap)
    return SpecConfig(
        algorithm=str(algo),
        num_steps=int(args["speculative_num_steps"]),
        topk=int(args["speculative_eagle_topk"]),
        num_draft_tokens=ndt,
        overlap=overlap,
    )
