"""The step count each decode cycle runs under ``--speculative-adaptive``, its cost and
its log lines: the scheduler side of sglang 0.5.23's ``AdaptiveController``
(``srt/speculative/adaptive_runtime_state.py``) and ``EAGLEWorkerV2``
(``srt/speculative/eagle_worker_v2.py``).

Per decode cycle of B running requests, as sglang does it:

1. ``activate(B)`` (``activate_step_by_batch``): the tier of B (padded to the captured
   CUDA-graph sizes) names a step count; when it differs from the active one the
   runtime state is switched and ``Switch adaptive runtime state: steps a -> b,
   draft_tokens a+1 -> b+1`` is logged, before the cycle runs;
2. the cycle costs ``spec_cycle_ms`` of a chain ``SpecConfig(algorithm, s, 1, s + 1)``
   for s >= 1, or the zero-step trivial verify (``perf_model.zero_step_cycle_ms``) for
   s = 0, evaluated at the running batch's mean context (the KV-read term), and each
   request's accept length comes from that config's distribution for the request's text
   category (one sampler per step count and category; 1 at s = 0);
3. ``on_verify_complete(correct drafts per request, len(batch))``
   (``on_verify_complete_cpu`` from the batch result processor) feeds the slot of the
   batch size; when its EMA moves it, ``Adaptive spec params updated: ...`` is logged by
   the slot and the new step count is switched to at once (another Switch line).

One simplification: with the overlap scheduler sglang processes a batch's results while
the next batch already runs, so a slot's decision lands one cycle later there; the
simulator feeds each cycle's results before the next cycle is activated.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from typing import Any

from specsweep.sim.adaptive import AdaptiveParams, captured_batch_sizes
from specsweep.sim.perf_model import AcceptSampler, PerfProfile, SpecConfig, spec_cycle_ms

BUILD_SECONDS_PER_STATE = 0.05  # of the load time: draft + verify graphs of one state
BUILD_GB_PER_STATE = 0.35  # their memory, for the startup line
ENV_SKIP_ZERO_STEP_DRAFT_EXTEND = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"


def runtime_from_args(
    profile: PerfProfile,
    spec: SpecConfig | None,
    args: Mapping[str, Any],
    seed: int,
    log: Callable[[str], None],
    env: Mapping[str, str] | None = None,
) -> AdaptiveRuntime | None:
    """The runtime of a server whose resolved args keep ``speculative_adaptive`` on (the
    tiers routed over its captured decode graph sizes); None otherwise."""
    if spec is None or not args.get("speculative_adaptive"):
        return None
    env = os.environ if env is None else env
    params = AdaptiveParams(
        int(args["speculative_num_steps"]), args.get("speculative_adaptive_config"), log=log
    )
    params.set_cuda_graph_bs(captured_batch_sizes(args))
    skip = (env.get(ENV_SKIP_ZERO_STEP_DRAFT_EXTEND) or "").strip().lower()
    return AdaptiveRuntime(
        profile,
        spec,
        params,
        random.Random(f"adaptive-{seed}"),
        skip_zero_step_draft_extend=skip in ("true", "1", "yes", "y"),
        log=log,
    )


class AdaptiveRuntime:
    """Active step count, per-step configs and samplers, and the switch/update lines."""

    def __init__(
        self,
        profile: PerfProfile,
        initial: SpecConfig,
        params: AdaptiveParams,
        rng: random.Random,
        skip_zero_step_draft_extend: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.profile = profile
        self.initial = initial
        self.params = params
        self.rng = rng
        self.skip_zero_step_draft_extend = skip_zero_step_draft_extend
        self._log = log or (lambda _msg: None)
        self.steps = initial.num_steps
        self._specs: dict[int, SpecConfig] = {}
        self._samplers: dict[tuple[int, str], AcceptSampler] = {}
        self.switches: list[tuple[int, int]] = []  # (from, to), in order

    @property
    def candidate_steps(self) -> list[int]:
        return self.params.candidate_steps

    def built_states(self) -> list[int]:
        """Step counts sglang builds a runtime state for at startup: every candidate but
        the initial one, which is registered from the worker as it stands."""
        return [s for s in self.candidate_steps if s != self.initial.num_steps]

    def built_line(self, steps: int, load_seconds: float) -> str:
        elapsed = BUILD_SECONDS_PER_STATE * load_seconds
        return (
            f"Built adaptive runtime state steps={steps}: elapsed={elapsed:.2f}s, "
            f"mem={BUILD_GB_PER_STATE:.2f}GB"
        )

    def spec_for(self, steps: int) -> SpecConfig:
        """The perf model's config of a step count (cached): a chain, or the trivial verify."""
        spec = self._specs.get(steps)
        if spec is None:
            i = self.initial
            spec = SpecConfig(i.algorithm, steps, 1, steps + 1, overlap=i.overlap)
            self._specs[steps] = spec
        return spec

    @property
    def active(self) -> SpecConfig:
        return self.spec_for(self.steps)

    def activate(self, batch_size: int) -> int:
        """Switch to the step count of this batch's tier (``activate_step_by_batch``)."""
        self._switch(self.params.steps_for_batch(batch_size))
        return self.steps

    def cycle_ms(self, batch_size: int, context: float | None = None) -> float:
        """Cost of one cycle at the active step count, ``context`` tokens of KV per
        request on average (default: the profile's calibration context)."""
        skip = self.skip_zero_step_draft_extend
        return spec_cycle_ms(self.profile, batch_size, self.active, skip, context)

    def sample(self, category: str = "random") -> int:
        """One request's accept length this cycle (bonus token included), for a request
        whose prompt is of ``category``."""
        key = (self.steps, category)
        sampler = self._samplers.get(key)
        if sampler is None:
            sampler = AcceptSampler(self.profile, self.active, self.rng, category)
            self._samplers[key] = sampler
        return sampler.sample()

    def on_verify_complete(self, correct_drafts: list[int], batch_size: int) -> None:
        """Feed the slot of ``batch_size``; switch at once when it decides to."""
        new = self.params.on_verify_complete(correct_drafts, batch_size)
        if new is not None:
            self._switch(new)

    def _switch(self, steps: int) -> None:
        if steps == self.steps:
            return
        self._log(
            f"Switch adaptive runtime state: steps {self.steps} -> {steps}, "
            f"draft_tokens {self.steps + 1} -> {steps + 1}"
        )
        self.switches.append((self.steps, steps))
        self.steps = steps
