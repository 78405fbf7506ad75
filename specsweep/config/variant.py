"""One server configuration and its stable name."""

from __future__ import annotations

import hashlib
import json

from pydantic import Field, field_validator, model_validator

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
        None, description="--speculative-algorithm; empty for the baseline."
    )
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: PositiveInt | None = Field(None, description="--speculative-num-steps.")
    topk: PositiveInt | None = Field(None, description="--speculative-eagle-topk.")
    num_draft_tokens: PositiveInt | None = Field(
        None,
        description="--speculative-num-draft-tokens; with topk=1 it defaults to num_steps+1.",
    )
    spec_v2: bool = Field(
        False, description=f"Run sglang's overlap spec path ({SPEC_V2_ENV}=True); needs topk=1."
    )
    max_running_requests: PositiveInt | None = Field(
        None, description="Overrides the server's --max-running-requests for this variant."
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment for this variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, v: str | None) -> str | None:
        if v is not None and not _VARIANT_NAME.fullmatch(v):  # no trailing newline
            raise ValueError(
                f"variant name {v!r}: use lowercase letters, digits and . _ = - (max 80)"
            )
        return v

    @field_validator("draft_model_path")
    @classmethod
    def _draft_path_is_a_value(cls, v: str | None) -> str | None:
        return v if v is None else _check_path_value("draft_model_path", v)

    @model_validator(mode="after")
    def _speculative_rules(self) -> Variant:
        spec_fields = {
            "draft_model_path": self.draft_model_path,
            "num_steps": self.num_steps,
            "topk": self.topk,
            "num_draft_tokens": self.num_draft_tokens,
        }
        if self.algorithm is None:
            given = [k for k, v in spec_fields.items() if v is not None]
            if given or self.spec_v2:
                raise ValueError(
                    f"{', '.join(given) or 'spec_v2'} set without an algorithm; "
                    "set algorithm (e.g. EAGLE3) or remove them for the baseline"
                )
            return self
        if self.algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and not self.draft_model_path:
            raise ValueError(f"{self.algorithm} needs draft_model_path")
        if self.num_steps is None or self.topk is None:
            raise ValueError(
                "set num_steps and topk together (sglang fails with a bare AssertionError "
                "when steps is missing, and picks hidden defaults when all are missing)"
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

    @property
    def is_baseline(self) -> bool:
        return self.algorithm is None

    @property
    def resolved_num_draft_tokens(self) -> int | None:
        if self.algorithm is None or self.num_steps is None:
            return None
        if self.topk == 1:
            return self.num_steps + 1
        return self.num_draft_tokens

    @property
    def uses_spec_v2(self) -> bool:
        return self.spec_v2 or _truthy(self.env.get(SPEC_V2_ENV))

    @property
    def named_env(self) -> dict[str, str]:
        """The env entries that enter the derived name, sorted by name.

        Left out: secret-looking names and ``secret:`` references (credentials do not
        change the server, and nothing derived from a secret is written to results), and
        on a speculative variant SGLANG_ENABLE_SPEC_V2, which its ``-v2`` suffix says.
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
        (``eagle3-s2-k1-d3``, ``-v2`` on the spec v2 path, `settings_suffix` last)."""
        if self.name:
            return self.name
        if self.algorithm is None:
            return "baseline" + self.settings_suffix
        label = (
            f"{self.algorithm.lower()}-s{self.num_steps}-k{self.topk}"
            f"-d{self.resolved_num_draft_tokens}"
        )
        return label + ("-v2" if self.uses_spec_v2 else "") + self.settings_suffix
