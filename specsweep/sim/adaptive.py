"""Adaptive speculative decoding (``--speculative-adaptive``) as sglang 0.5.23 runs it.

Written from sglang's source, not copied: ``srt/speculative/adaptive_spec_params.py``
(the config, ``AdaptiveStepSlot``, ``AdaptiveSpeculativeParams``),
``srt/arg_groups/speculative_hook.py`` (``_maybe_disable_adaptive``,
``_init_adaptive_speculative_params``) and ``srt/arg_groups/cuda_graph_hook.py``
(``generate_decode_cuda_graph_batch_sizes``). The engine side (which step count each
decode cycle runs, its cost, the switch log lines) is ``specsweep.sim.adaptive_runtime``.

The config is a JSON object keyed by batch size (a "tier"); each tier lists the step
counts it may use (``candidate_steps``, 0 = no drafting) and may override the top-level
tuning keys (``ema_alpha`` 0.2, ``update_interval`` 5, ``warmup_batches`` 10,
``down_hysteresis`` -0.25, ``up_hysteresis`` 0.0, ``ceiling_coeff`` 0). Per tier a slot
keeps an EMA of accepted drafts per request and moves its step count one candidate at a
time: acceptance-driven, not cost-driven. A decode batch of B requests is padded up to
the captured CUDA-graph batch sizes, then served by the closest tier at or below it.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from specsweep.sim.version import adaptive_runs_with_overlap

DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}  # fmt: skip

FALLBACK_WARNING = (
    "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
)
OVERLAP_REASON = "the overlap scheduler (spec v2) is not supported"

Log = Callable[[str], None]


def load_adaptive_config(path: str | None) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """(whole config, {tier batch size: tier entry}); sglang's ``_load_adaptive_config``.

    The file is JSON (a bad one raises json's error, a missing one OSError); keys that
    are not all digits are top-level settings, ignored as tiers. ValueError with
    sglang's messages for a bad ``candidate_steps`` or no tier at all.
    """
    if path is not None:
        with open(path) as f:
            cfg = json.load(f)
    else:
        cfg = DEFAULT_ADAPTIVE_CONFIG
    tiers: dict[int, dict[str, Any]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps")
        valid = isinstance(steps, list) and steps
        if not valid or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise ValueError(
                f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}"
            )
        tiers[int(key)] = entry
    if not tiers:
        raise ValueError(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            'e.g. {"1": {"candidate_steps": [1,3,7]}}. '
            f"Got keys: {list(cfg.keys())}"
        )
    return cfg, tiers


def candidate_steps_union(path: str | None) -> list[int]:
    """Every tier's candidates together, sorted (``resolve_candidate_steps_from_config``)."""
    _, tiers = load_adaptive_config(path)
    return sorted({s for entry in tiers.values() for s in entry["candidate_steps"]})


class AdaptiveStepSlot:
    """One tier's step count, driven by an EMA of accepted drafts (sglang's
    ``AdaptiveStepSlot``).

    The EMA starts at ``current_steps - 1`` and is only updated while the slot drafts
    (steps > 0). After ``warmup_batches`` updates, every ``update_interval``-th one
    recomputes: from 0 steps it probes the next candidate up (resetting a negative EMA
    to that step's neutral ``target - 1``); otherwise it steps down while the EMA is at
    or below ``prev - 0.5`` (``0.5`` when prev is 0) plus ``down_hysteresis``, and only
    if it did not go down, up while the EMA is above ``current - 0.5 +
    up_hysteresis``; ``ceiling_coeff`` > 0 caps a non-increasing target at
    ``max(1, ceil(ema * ceiling_coeff))``.
    """

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any], log: Log | None = None):
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = cfg.get("ema_alpha", 0.2)
        self.update_interval = cfg.get("update_interval", 5)
        self.warmup_batches = cfg.get("warmup_batches", 10)
        self.down_hysteresis = cfg.get("down_hysteresis", -0.25)
        self.up_hysteresis = cfg.get("up_hysteresis", 0.0)
        self.ceiling_coeff = cfg.get("ceiling_coeff", 0)
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self.batch_count = 0
        self._log = log or (lambda _msg: None)

    def update(self, num_correct_drafts_per_req: list[int]) -> bool:
        """Feed one verify's accepted drafts per request; True when the steps changed."""
        if not num_correct_drafts_per_req:
            return False
        if self.current_steps > 0:
            avg = sum(num_correct_drafts_per_req) / len(num_correct_drafts_per_req)
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * avg
        self.batch_count += 1
        if self.batch_count <= self.warmup_batches:
            return False
        if (self.batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        cands = self.candidate_steps
        old = self.current_steps
        idx = start = cands.index(old)
        if old == 0:
            idx = min(idx + 1, len(cands) - 1)
            target = cands[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = cands[idx - 1]
            threshold = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len > threshold:
                break
            idx -= 1
        if idx == start:
            while idx < len(cands) - 1 and (
                self.ema_accept_len > cands[idx] - 0.5 + self.up_hysteresis
            ):
                idx += 1
        target = cands[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and cands[idx] > ceiling:
                    idx -= 1
                target = cands[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> bool:
        if target == old:
            return False
        self.current_steps = target
        self._log(
            f"Adaptive spec params updated: steps {old} -> {target} "
            f"(ema_accept_len={self.ema_accept_len:.2f})"
        )
        return True


class AdaptiveParams:
    """The tiers and their routing (sglang's ``AdaptiveSpeculativeParams``)."""

    def __init__(self, initial_steps: int, cfg_path: str | None = None, log: Log | None = None):
        cfg, tiers = load_adaptive_config(cfg_path)
        self.tiers = sorted(tiers)
        self.slots = {
            bs: AdaptiveStepSlot(initial_steps, {**cfg, **tiers[bs]}, log) for bs in self.tiers
        }
        union = {s for slot in self.slots.values() for s in slot.candidate_steps}
        self.candidate_steps = sorted(union)
        self.cuda_graph_bs: list[int] | None = None

    def init_line(self) -> str:
        """The line sglang logs when the params are built (first tier's slot)."""
        first = self.slots[self.tiers[0]]
        return (
            f"AdaptiveSpeculativeParams initialized: steps={first.current_steps}, "
            f"candidate_steps={first.candidate_steps}"
        )

    def set_cuda_graph_bs(self, cuda_graph_bs: list[int] | None) -> None:
        """The captured decode batch sizes; None with CUDA graphs disabled (no padding)."""
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def padded(self, batch_size: int) -> int:
        """Up to the next captured size; unchanged above the largest one or without graphs."""
        graphs = self.cuda_graph_bs
        if graphs is None:
            return batch_size
        idx = bisect.bisect_left(graphs, batch_size)
        return graphs[idx] if idx < len(graphs) else batch_size

    def tier_for(self, batch_size: int) -> int:
        """The closest tier key at or below the padded size (the smallest if none)."""
        idx = bisect.bisect_right(self.tiers, self.padded(batch_size)) - 1
        return self.tiers[max(0, idx)]

    def route(self, batch_size: int) -> AdaptiveStepSlot:
        return self.slots[self.tier_for(batch_size)]

    def steps_for_batch(self, batch_size: int) -> int:
        return self.route(batch_size).current_steps

    def on_verify_complete(self, correct_drafts: list[int], batch_size: int) -> int | None:
        """Feed the slot of ``batch_size``; its new step count when it changed, else None."""
        slot = self.route(batch_size)
        return slot.current_steps if slot.update(correct_drafts) else None


def decode_cuda_graph_batch_sizes(max_bs: int, speculative: bool = True) -> list[int]:
    """The decode batch sizes sglang captures graphs for (``--cuda-graph-bs`` unset).

    With speculation: 1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8, 272.. step 16;
    without: 1, 2, 4, 8, 12, 16-256 step 8, 272-496 step 16, 512.. step 32. Sizes above
    ``max_bs`` are dropped and ``max_bs`` itself is always captured.
    """
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
        sizes += list(range(272, max_bs + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += list(range(512, max_bs + 1, 32))
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def captured_batch_sizes(args: Mapping[str, Any]) -> list[int] | None:
    """The server's captured decode sizes: ``--cuda-graph-bs`` as given, else generated
    up to ``cuda_graph_max_bs``; None with ``--disable-cuda-graph``."""
    if args.get("disable_cuda_graph"):
        return None
    if args.get("cuda_graph_bs"):
        return sorted(int(bs) for bs in args["cuda_graph_bs"])
    return decode_cuda_graph_batch_sizes(int(args["cuda_graph_max_bs"]), speculative=True)


def unsupported_reason(args: Mapping[str, Any], version: str, overlap: bool) -> str | None:
    """Why adaptive speculation cannot run with these args (``adaptive_unsupported_reason``
    of 0.5.23, plus 0.5.11-0.5.22's refusal of the overlap scheduler); None if it can."""
    algo = args.get("speculative_algorithm")
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    topk = args.get("speculative_eagle_topk")
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if args.get("enable_dp_attention") and int(args.get("dp_size") or 1) > 1:
        return (
            "attention DP is not supported "
            "(adaptive tier decisions are not synchronized across DP ranks)"
        )
    if overlap and not adaptive_runs_with_overlap(version):
        return OVERLAP_REASON
    return None


def resolve_adaptive_args(
    args: dict[str, Any], version: str, overlap: bool, warnings: list[str]
) -> None:
    """sglang's ``_maybe_disable_adaptive`` then ``_init_adaptive_speculative_params``.

    Unsupported: the fallback warning and ``speculative_adaptive`` off (static params).
    Otherwise the config is loaded (errors raise), topk unset becomes 1, steps unset the
    middle of the candidates' union, steps outside it a ValueError, and draft tokens
    ``steps + 1``.
    """
    if not args.get("speculative_adaptive"):
        return
    reason = unsupported_reason(args, version, overlap)
    if reason is not None:
        warnings.append(FALLBACK_WARNING.format(reason=reason))
        args["speculative_adaptive"] = False
        return
    union = candidate_steps_union(args.get("speculative_adaptive_config"))
    if args.get("speculative_eagle_topk") is None:
        args["speculative_eagle_topk"] = 1
    if args.get("speculative_num_steps") is None:
        args["speculative_num_steps"] = union[len(union) // 2]
    steps = args["speculative_num_steps"]
    if steps not in union:
        raise ValueError(
            f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps "
            f"{union}. Pass one of those values."
        )
    args["speculative_num_draft_tokens"] = steps + 1
