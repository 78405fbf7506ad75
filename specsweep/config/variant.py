"""One server configuration and its stable name."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator, model_validator

from specsweep.config import algorithms
from specsweep.config.adaptive import ADAPTIVE_ALGORITHMS, AdaptiveValue
from specsweep.config.algorithms import TREE_ALGORITHMS, NgramSettings
from specsweep.config.common import (
    _VARIANT_NAME,
    SPEC_V2_ENV,
    EnvMap,
    ExtraArgs,
    PositiveInt,
    SpecAlgorithm,
    _check_path_value,
    _Model,
    _truthy,
)
from specsweep.config.redact import is_secret_name, redact_args
from specsweep.config.secrets import is_reference


class Variant(_Model):
    """One server configuration: the baseline (no algorithm) or a speculative setup."""

    name: str | None = Field(
        None, description="Stable name; derived from the parameters when left out."
    )
    algorithm: SpecAlgorithm | None = Field(
        None,
        description="--speculative-algorithm; empty for the baseline. EAGLE, EAGLE3, NEXTN, "
        "STANDALONE, FROZEN_KV_MTP draft trees (num_steps, topk, num_draft_tokens); NGRAM "
        "(ngram, num_draft_tokens), DFLASH and DSPARK (block_size) and UNO (uno_lora_path, "
        "num_draft_tokens) have their own parameters.",
    )
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: Annotated[int, Field(ge=0)] | None = Field(
        None,
        description="--speculative-num-steps (>= 1; an adaptive variant may start at 0). "
        "Adaptive: one of the tiers' candidates, default the middle one (as sglang).",
    )
    topk: PositiveInt | None = Field(None, description="--speculative-eagle-topk.")
    num_draft_tokens: PositiveInt | None = Field(
        None,
        description="--speculative-num-draft-tokens; with topk=1 it defaults to num_steps+1.",
    )
    block_size: PositiveInt | None = Field(
        None,
        description="DFLASH: --speculative-dflash-block-size (the verify window); DSPARK: "
        "--speculative-dspark-block-size (gamma, drafts per block; verify window gamma + 1).",
    )
    ngram: NgramSettings | None = Field(
        None, description="NGRAM's --speculative-ngram-* settings (sglang's defaults if unset)."
    )
    uno_lora_path: str | None = Field(
        None, description="UNO: --uno-lora-path, the draft LoRA over the target."
    )
    spec_v2: bool = Field(
        False, description=f"Run sglang's overlap spec path ({SPEC_V2_ENV}=True); needs topk=1."
    )
    max_running_requests: PositiveInt | None = Field(
        None, description="Overrides the server's --max-running-requests for this variant."
    )
    adaptive: AdaptiveValue = Field(
        None,
        description="SGLang's adaptive speculation (--speculative-adaptive, sglang >= 0.5.11): "
        "true for the engine's default tiers, {tiers: {1: [3], 8: [1], 32: [0]}} for yours, "
        "or the path of an sglang adaptive config file. EAGLE/EAGLE3 with topk 1 only.",
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment for this variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @model_validator(mode="before")
    @classmethod
    def _ngram_defaults(cls, data: object) -> object:
        """An NGRAM variant without ngram settings has sglang's: the same server, one model."""
        if isinstance(data, dict) and data.get("algorithm") == "NGRAM" and not data.get("ngram"):
            return {**data, "ngram": {}}
        return data

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, v: str | None) -> str | None:
        if v is not None and not _VARIANT_NAME.fullmatch(v):  # no trailing newline
            raise ValueError(
                f"variant name {v!r}: use lowercase letters, digits and . _ = - (max 80)"
            )
        return v

    @field_validator("draft_model_path", "uno_lora_path")
    @classmethod
    def _draft_path_is_a_value(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else _check_path_value(str(info.field_name), v)

    @model_validator(mode="after")
    def _speculative_rules(self) -> Variant:
        spec_fields = {
            "draft_model_path": self.draft_model_path,
            "num_steps": self.num_steps,
            "topk": self.topk,
            "num_draft_tokens": self.num_draft_tokens,
            "block_size": self.block_size,
            "ngram": self.ngram,
            "uno_lora_path": self.uno_lora_path,
        }
        if self.algorithm is None:
            given = [k for k, v in spec_fields.items() if v is not None]
            if self.adaptive is not None:
                given.append("adaptive")
            if given or self.spec_v2:
                raise ValueError(
                    f"{', '.join(given) or 'spec_v2'} set without an algorithm; "
                    "set algorithm (e.g. EAGLE3) or remove them for the baseline"
                )
            return self
        algorithms.check_foreign_fields(self)
        tree_with_draft = ("EAGLE", "EAGLE3", "STANDALONE", "FROZEN_KV_MTP")
        if self.algorithm in tree_with_draft and not self.draft_model_path:
            raise ValueError(f"{self.algorithm} needs draft_model_path")
        if self.adaptive is not None:
            return self._adaptive_rules()
        if self.algorithm not in TREE_ALGORITHMS:
            algorithms.check_non_tree(self)
            return self
        if self.num_steps is None or self.topk is None:
            raise ValueError(
                "set num_steps and topk together (sglang fails with a bare AssertionError "
                "when steps is missing, and picks hidden defaults when all are missing)"
            )
        if self.num_steps < 1:
            raise ValueError(
                "num_steps must be at least 1 (0, no drafting, exists only as an adaptive "
                "tier's candidate)"
            )
        chain = self.num_steps + 1
        tree_max = self.num_steps * self.topk + 1
        if self.topk == 1 and self.num_draft_tokens not in (None, chain):
            raise ValueError(
                f"with topk=1 sglang forces num_draft_tokens = num_steps + 1 = {chain}; "
                f"got {self.num_draft_tokens}. Leave it out or set {chain}"
            )
        if self.topk > 1 and self.num_draft_tokens is None:
            raise ValueError(
                f"topk={self.topk} needs num_draft_tokens (between 2 and num_steps*topk+1 = "
                f"{tree_max})"
            )
        if self.num_draft_tokens is not None and self.num_draft_tokens > tree_max:
            raise ValueError(
                f"num_draft_tokens={self.num_draft_tokens} exceeds num_steps*topk+1 = {tree_max}: "
                "the draft tree cannot hold that many tokens"
            )
        if self.uses_spec_v2 and self.topk > 1:
            raise ValueError(
                f"{SPEC_V2_ENV} (the spec v2 overlap path) only supports topk=1; "
                f"got topk={self.topk}"
            )
        return self

    def _adaptive_rules(self) -> Variant:
        """sglang's own rules for --speculative-adaptive, which it enforces late or by
        silently running static (adaptive_unsupported_reason, _init_adaptive_speculative_params)."""
        assert self.adaptive is not None
        if self.algorithm not in ADAPTIVE_ALGORITHMS:
            raise ValueError(
                f"adaptive: sglang runs adaptive speculation with EAGLE or EAGLE3 only; with "
                f"algorithm {self.algorithm} it logs 'speculative_adaptive disabled' and runs "
                "static. Use EAGLE3 (or EAGLE), or remove adaptive"
            )
        if self.topk not in (None, 1):
            raise ValueError(
                f"adaptive: sglang's adaptive speculation needs topk=1 (a chain); got "
                f"topk={self.topk}, with which it falls back to static params. Set topk: 1 "
                "or leave it out"
            )
        union = self.adaptive.candidate_steps
        if self.num_steps is not None and self.num_steps not in union:
            raise ValueError(
                f"adaptive: num_steps={self.num_steps} is not among the tiers' candidate "
                f"steps {union} (sglang refuses it); pick one of them or leave num_steps out "
                f"(sglang then starts at {self.adaptive.initial_steps})"
            )
        steps = self.resolved_num_steps
        assert steps is not None
        if self.num_draft_tokens not in (None, steps + 1):
            raise ValueError(
                f"adaptive: sglang sets num_draft_tokens = num_steps + 1 = {steps + 1}; got "
                f"{self.num_draft_tokens}. Leave it out"
            )
        return self

    @property
    def is_baseline(self) -> bool:
        return self.algorithm is None

    @property
    def is_adaptive(self) -> bool:
        return self.adaptive is not None and self.algorithm is not None

    @property
    def resolved_num_steps(self) -> int | None:
        """The steps the server starts at (an adaptive variant's default: the middle candidate)."""
        if self.algorithm is None:
            return None
        if self.algorithm not in TREE_ALGORITHMS:
            return algorithms.resolved(self)[0]
        if self.num_steps is None and self.adaptive is not None:
            return self.adaptive.initial_steps
        return self.num_steps

    @property
    def resolved_topk(self) -> int | None:
        if self.algorithm is None:
            return None
        if self.algorithm not in TREE_ALGORITHMS:
            return algorithms.resolved(self)[1]
        return 1 if self.adaptive is not None and self.topk is None else self.topk

    @property
    def resolved_num_draft_tokens(self) -> int | None:
        if self.algorithm is not None and self.algorithm not in TREE_ALGORITHMS:
            return algorithms.resolved(self)[2]
        steps = self.resolved_num_steps
        if self.algorithm is None or steps is None:
            return None
        if self.resolved_topk == 1:
            return steps + 1
        return self.num_draft_tokens

    @property
    def resolved_ngram(self) -> NgramSettings:
        """NGRAM's settings, sglang's defaults where unset."""
        return self.ngram or NgramSettings()

    @property
    def uses_spec_v2(self) -> bool:
        return self.spec_v2 or _truthy(self.env.get(SPEC_V2_ENV))

    @property
    def named_env(self) -> dict[str, str]:
        """The env entries that enter the derived name, sorted by name.

        Left out: secret names (config/redact.py's rule) and ``secret:`` references
        (credentials do not change the server, and nothing derived from a secret is written
        to results), and on a speculative variant SGLANG_ENABLE_SPEC_V2, which its ``-v2``
        suffix says. A knob that only mentions a secret word (``X_TOKEN_FACTOR``) counts.
        """
        return {
            k: v
            for k, v in sorted(self.env.items())
            if not is_secret_name(k)
            and not is_reference(v)
            and not (k == SPEC_V2_ENV and not self.is_baseline)
        }

    @property
    def settings_suffix(self) -> str:
        """``-x`` and 6 hex digits of a sha256 over the extra_args (in order, secret flag
        values hidden) and `named_env`, as canonical JSON; empty when both are empty."""
        args = redact_args(self.extra_args)
        env = self.named_env
        if not args and not env:
            return ""
        canonical = json.dumps(
            {"env": env, "extra_args": args},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
        )
        return "-x" + hashlib.sha256(canonical.encode()).hexdigest()[:6]

    @property
    def label(self) -> str:
        """The variant's stable name: the given one, else derived from its parameters
        (``eagle3-s2-k1-d3``; adaptive: ``eagle3-adaptive-default`` for sglang's tiers,
        ``eagle3-adaptive-<6 hex of the tiers' hash>``; ``-v2`` on the spec v2 path;
        ``frozen-kv-mtp-s3-k1-d4``; NGRAM, DFLASH, DSPARK, UNO: `algorithms.label`, e.g.
        ``ngram-w10-d12``, ``dflash-b16``; `settings_suffix` last)."""
        if self.name:
            return self.name
        if self.algorithm is None:
            return "baseline" + self.settings_suffix
        v2 = "-v2" if self.uses_spec_v2 else ""
        if self.adaptive is not None:
            label = f"{self.algorithm.lower()}-adaptive-{self.adaptive.name_part}"
            if self.num_steps is not None and self.num_steps != self.adaptive.initial_steps:
                label += f"-s{self.num_steps}"
            return label + v2 + self.settings_suffix
        if self.algorithm not in TREE_ALGORITHMS:
            return algorithms.label(self) + self.settings_suffix
        label = (
            f"{self.algorithm.lower().replace('_', '-')}-s{self.num_steps}-k{self.topk}"
            f"-d{self.resolved_num_draft_tokens}"
        )
        return label + v2 + self.settings_suffix
