"""SGLang's adaptive speculation (``--speculative-adaptive``) as a configuration value.

sglang 0.5.11+ reads a JSON object keyed by batch size (``{"1": {"candidate_steps":
[1, 3, 5, 7]}, "8": {...}}``); per tier an EMA of accepted drafts picks
``num_steps`` among the candidates (0 = no drafting). The running batch is padded
to a captured CUDA-graph batch size and routed to the closest tier at or below it.
This module holds that file as a pydantic model, checks it with sglang's own rules
(``srt/speculative/adaptive_spec_params.py``, ``srt/arg_groups/speculative_hook.py``
in 0.5.23) before anything is launched, and gives it a stable hash for names and
file names. A variant says ``adaptive: true`` (the engine's default tiers),
``adaptive: {tiers: {1: [3], 8: [1], 32: [0]}}`` or ``adaptive: path/to/file.json``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from specsweep.config.common import SchemaAlsoAccepts, _Model

# sglang 0.5.23's DEFAULT_ADAPTIVE_CONFIG (what `adaptive: true` runs on that version).
DEFAULT_TIERS: dict[int, list[int]] = {1: [1, 3, 5, 7], 8: [0, 1, 3], 32: [0, 1], 64: [0]}
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")  # NEXTN is sglang's alias of EAGLE
# Per-tier fields sglang reads (AdaptiveStepSlot), with their defaults there; a value set
# at the top level of the file applies to every tier that does not set it.
TIER_DEFAULTS: dict[str, float] = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "down_hysteresis": -0.25,
    "up_hysteresis": 0.0,
    "ceiling_coeff": 0,
}
_INT_FIELDS = ("update_interval", "warmup_batches")


class AdaptiveTier(_Model):
    """One batch-size tier: the step counts its EMA may choose from, and how it moves."""

    candidate_steps: list[Annotated[int, Field(ge=0)]] = Field(
        ..., min_length=1, description="Step counts this tier may run; 0 = no drafting."
    )
    ema_alpha: float | None = Field(None, gt=0, le=1, description="EMA weight (sglang: 0.2).")
    update_interval: int | None = Field(
        None, ge=1, description="Verify batches between decisions (sglang: 5)."
    )
    warmup_batches: int | None = Field(
        None, ge=0, description="Verify batches before the first decision (sglang: 10)."
    )
    down_hysteresis: float | None = Field(None, description="Added to the drop thresholds.")
    up_hysteresis: float | None = Field(None, description="Added to the rise thresholds.")
    ceiling_coeff: float | None = Field(
        None, ge=0, description="Caps a step-down at ceil(ema x coeff); 0 = off."
    )

    def sglang_entry(self) -> dict[str, Any]:
        """The tier as sglang's file holds it (candidates sorted, unset fields left out)."""
        entry = self.model_dump(exclude_none=True)
        entry["candidate_steps"] = sorted(set(self.candidate_steps))
        return entry


def _tier_value(value: object) -> object:
    """`1: [3]` is shorthand for `1: {candidate_steps: [3]}`."""
    if isinstance(value, list):
        return {"candidate_steps": value}
    return value


def _parse_tiers(raw: object) -> object:
    if raw is None or not isinstance(raw, dict):
        return raw
    tiers: dict[int, object] = {}
    for key, value in raw.items():
        text = str(key).strip()
        if isinstance(key, bool) or not text.isdigit():
            raise ValueError(
                f"tier key {key!r} is not a batch size: tiers are keyed by non-negative "
                'integers, e.g. {1: [3], 8: [1], 32: [0]} (or "1" in a JSON file)'
            )
        tiers[int(text)] = _tier_value(value)
    return tiers


def _from_shorthand(value: object) -> object:
    """true -> the engine's default tiers; a string -> a JSON file (sglang's format)."""
    if value is True:
        return {}
    if value is False:
        return None
    if isinstance(value, str | Path):
        return {"file": str(value)}
    return value


_STEPS_SCHEMA = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}


class AdaptiveSpec(_Model):
    """SGLang's adaptive speculation for one variant: the engine's default tiers, or yours."""

    tiers: Annotated[
        dict[int, Annotated[AdaptiveTier, SchemaAlsoAccepts(_STEPS_SCHEMA)]] | None,
        BeforeValidator(_parse_tiers),
    ] = Field(
        None,
        description="Batch-size tiers, e.g. {1: [3], 8: [1], 32: [0]} or "
        "{1: {candidate_steps: [1, 3], down_hysteresis: -0.25}}; empty: sglang's default "
        "tiers (0.5.23: 1:[1,3,5,7], 8:[0,1,3], 32:[0,1], 64:[0]).",
    )
    defaults: dict[str, float] = Field(
        default_factory=dict,
        description="Per-tier fields applied to every tier that does not set them "
        "(ema_alpha, update_interval, warmup_batches, down/up_hysteresis, ceiling_coeff).",
    )
    file: str | None = Field(
        None,
        description="An sglang adaptive config file (JSON) on this machine, read and "
        "checked now; its contents are what the server gets and the results record.",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("file"):
            return data
        if set(data) - {"file"}:
            raise ValueError("adaptive: give either file or tiers/defaults, not both")
        path = Path(str(data["file"])).expanduser()
        try:
            raw = json.loads(path.read_text())
        except OSError as exc:
            raise ValueError(f"adaptive config file {path}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"adaptive config file {path}: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"adaptive config file {path}: must be a JSON object")
        tiers = {k: v for k, v in raw.items() if str(k).isdigit()}
        other = {k: v for k, v in raw.items() if not str(k).isdigit()}
        unknown = [k for k in other if k not in TIER_DEFAULTS and not str(k).startswith("_")]
        if unknown:
            raise ValueError(
                f"adaptive config file {path}: keys {unknown} are neither batch sizes nor "
                f"tier fields ({', '.join(TIER_DEFAULTS)}); keys starting with _ are comments"
            )
        if not tiers:
            raise ValueError(
                f'adaptive config file {path}: no batch-size keys (e.g. {{"1": '
                '{"candidate_steps": [1, 3]}}); sglang refuses such a file'
            )
        defaults = {k: v for k, v in other.items() if k in TIER_DEFAULTS}
        return {"file": str(path), "tiers": tiers, "defaults": defaults}

    @model_validator(mode="after")
    def _check(self) -> AdaptiveSpec:
        for key, value in self.defaults.items():
            if key not in TIER_DEFAULTS:
                raise ValueError(
                    f"adaptive.defaults: {key!r} is not a tier field; "
                    f"use one of {', '.join(TIER_DEFAULTS)}"
                )
            AdaptiveTier(candidate_steps=[0], **{key: value})  # the tier field's own checks
            if key in _INT_FIELDS and value != int(value):
                raise ValueError(f"adaptive.defaults.{key} must be an integer, got {value}")
        if self.tiers is not None and not self.tiers:
            raise ValueError("adaptive.tiers is empty; leave it out for sglang's default tiers")
        return self

    @property
    def uses_default_tiers(self) -> bool:
        return self.tiers is None

    @property
    def tier_steps(self) -> dict[int, list[int]]:
        """Batch size -> sorted candidate steps (sglang 0.5.23's defaults when unset)."""
        if self.tiers is None:
            return {k: list(v) for k, v in DEFAULT_TIERS.items()}
        return {k: sorted(set(t.candidate_steps)) for k, t in sorted(self.tiers.items())}

    @property
    def candidate_steps(self) -> list[int]:
        """The union of every tier's candidates: sglang's --speculative-num-steps must be one."""
        return sorted({s for steps in self.tier_steps.values() for s in steps})

    @property
    def initial_steps(self) -> int:
        """What sglang starts at when --speculative-num-steps is unset: the middle candidate."""
        union = self.candidate_steps
        return union[len(union) // 2]

    def sglang_config(self) -> dict[str, Any] | None:
        """The JSON object for --speculative-adaptive-config; None for the default tiers."""
        if self.tiers is None:
            return None
        out: dict[str, Any] = {
            k: (int(v) if k in _INT_FIELDS else v) for k, v in sorted(self.defaults.items())
        }
        for bs, tier in sorted(self.tiers.items()):
            out[str(bs)] = tier.sglang_entry()
        return out

    def config_json(self) -> str | None:
        """Canonical JSON of `sglang_config` (sorted keys, no spaces): hashed and recorded."""
        cfg = self.sglang_config()
        if cfg is None:
            return None
        return json.dumps(cfg, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """12 hex digits of the config's sha256 ('default' for the engine's tiers)."""
        text = self.config_json()
        return "default" if text is None else hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def name_part(self) -> str:
        """`default`, or the first 6 hex digits of the config's hash."""
        return "default" if self.tiers is None else self.digest[:6]

    def file_name(self) -> str | None:
        """The config's file name under the target's workdir (content-addressed)."""
        return None if self.tiers is None else f"adaptive/{self.digest}.json"

    def describe(self) -> str:
        """`1:[1,3,5,7] 8:[0,1,3] ...`: the tiers in one line."""
        parts = [f"{k}:[{','.join(map(str, v))}]" for k, v in self.tier_steps.items()]
        return ("sglang default tiers " if self.tiers is None else "tiers ") + " ".join(parts)


# `true` and a path: in the JSON schema (UI form, deployment parameters) too
AdaptiveValue = Annotated[
    AdaptiveSpec | None,
    BeforeValidator(_from_shorthand),
    SchemaAlsoAccepts({"type": "boolean"}, {"type": "string"}),
]
