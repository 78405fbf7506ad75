"""Performance profiles as data files (``specsweep/sim/profiles/*.yaml``).

A profile is a deployment, not code: its step-time constants, acceptance curve,
limits, hardware (what the simulated ``nvidia-smi`` shows) and startup times, the
assumptions behind them in prose, and the real measurements it is calibrated to. Data
files keep those numbers reviewable next to their sources, and let a user describe
their own deployment without touching Python: ``SPECSWEEP_SIM_PROFILE`` takes a
bundled name or a path to a YAML (or JSON) file of the same shape.

Shape (every section and key optional; unknown keys are errors)::

    name: my-profile            # must match the file name for bundled profiles
    extends: default            # start from another profile (bundled name or path)
    description: one line
    assumptions: |              # free text: where each number comes from
    calibration_context: 256    # mean KV tokens per running sequence the fit was made at
    hardware:    {gpu_name, gpu_count, gpu_memory_mib, cuda_context_mib}
    startup:     {load_seconds, warmup_seconds, health_seconds}
    limits:      {max_running_requests, max_total_num_tokens, context_length}
    target:      {t0_ms, per_seq_ms, per_token_ms, knee_tokens, per_token_ms_above_knee,
                  kv_ms_per_ktok, sched_overhead_ms, prefill_t0_ms, prefill_ms_per_token}
    draft:       {t0_ms, per_token_ms, kv_ms_per_ktok, prefill_share, standalone_factor,
                  ngram_ms, ngram_ms_per_seq, block_factor, mtp_layer_share, uno_factor}
    speculation: {overhead_ms, per_seq_ms, zero_step_per_seq_ms}
    acceptance:  {p, decay, by_depth, topk_gain, eagle_factor,
                  rejection_scale: {category: r, ...},   # merged over the parent's
                  ngram_match_rate: {category: m, ...},  # merged too
                  ngram_decay, block_p, block_decay}
    calibration:                # real measurements this profile reproduces
      - {label, concurrency, spec: {algorithm, steps, topk, draft_tokens},
         max_running_requests, tok_s, accept_length, tolerance, source,
         context, category}     # context: mean KV tokens per sequence; category: random

The meaning of each constant is in ``specsweep.sim.perf_model``. One that only adaptive
speculation uses: ``speculation.zero_step_per_seq_ms`` (default 0.0), the per-request
bookkeeping a steps-0 cycle (sglang's trivial verify: no drafting, a 1-node tree per
request) still pays beyond a plain decode step; ``per_seq_ms`` is that cost for a
drafting cycle (draft KV slots, tree masks, accept-path moves) and does not apply at
steps 0. Each profile's ``assumptions`` says what steps 0 costs there against the
baseline step.

``target.kv_ms_per_ktok`` and ``draft.kv_ms_per_ktok`` are the KV-cache reads per 1000
tokens of one sequence's context per forward, derived from the model's KV bytes per
token and the GPU's memory bandwidth (each profile writes the derivation); they are
charged on top of ``per_seq_ms``, so a profile fitted at a context states it
(``calibration_context``, and ``context`` per calibration point) and its ``per_seq_ms``
is what is left of the fitted per-sequence cost once the KV read at that context is
taken out. ``acceptance.rejection_scale`` maps text categories (``perf_model.CATEGORIES``)
to ``r`` in ``alpha' = 1 - (1 - alpha) * r``; the acceptance constants describe random ids.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specsweep.sim.perf_model import CATEGORIES, CalibrationPoint, PerfProfile, SpecConfig

SUFFIXES = (".yaml", ".yml", ".json")

# YAML section -> {YAML key -> PerfProfile field}
SECTIONS: dict[str, dict[str, str]] = {
    "hardware": {k: k for k in ("gpu_name", "gpu_count", "gpu_memory_mib", "cuda_context_mib")},
    "startup": {k: k for k in ("load_seconds", "warmup_seconds", "health_seconds")},
    "limits": {
        "max_running_requests": "default_max_running_requests",
        "max_total_num_tokens": "max_total_num_tokens",
        "context_length": "context_length",
    },
    "target": {
        "t0_ms": "t0_ms",
        "per_seq_ms": "a_req_ms",
        "per_token_ms": "a_tok_ms",
        "knee_tokens": "knee_tokens",
        "per_token_ms_above_knee": "a_knee_ms",
        "kv_ms_per_ktok": "kv_ms_per_ktok",
        "sched_overhead_ms": "sched_overhead_ms",
        "prefill_t0_ms": "prefill_t0_ms",
        "prefill_ms_per_token": "prefill_ms_per_token",
    },
    "draft": {
        "t0_ms": "draft_t0_ms",
        "per_token_ms": "draft_ms_per_token",
        "kv_ms_per_ktok": "draft_kv_ms_per_ktok",
        "prefill_share": "draft_prefill_share",
        "standalone_factor": "standalone_draft_factor",
        "ngram_ms": "ngram_draft_ms",
        "ngram_ms_per_seq": "ngram_ms_per_req",
        "block_factor": "block_draft_factor",
        "mtp_layer_share": "mtp_layer_share",
        "uno_factor": "uno_draft_factor",
    },
    "speculation": {
        "overhead_ms": "spec_overhead_ms",
        "per_seq_ms": "spec_ms_per_req",
        "zero_step_per_seq_ms": "zero_step_per_seq_ms",
    },
    "acceptance": {
        "p": "accept_p",
        "decay": "accept_decay",
        "by_depth": "accept_by_depth",
        "topk_gain": "topk_gain",
        "eagle_factor": "eagle_accept_factor",
        "rejection_scale": "rejection_scale",
        "ngram_match_rate": "ngram_match_rate",
        "ngram_decay": "ngram_decay",
        "block_p": "block_accept_p",
        "block_decay": "block_accept_decay",
    },
}
TOP_KEYS = {
    "name", "extends", "description", "assumptions", "calibration", "calibration_context",
    *SECTIONS,
}  # fmt: skip
POINT_KEYS = {f.name for f in dataclasses.fields(CalibrationPoint)}
SPEC_KEYS = {"algorithm", "steps", "topk", "draft_tokens"}
_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(PerfProfile)}


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and the key."""


def bundled_dir() -> Path:
    """The directory of the profiles shipped in the package."""
    return Path(str(resources.files("specsweep.sim") / "profiles"))


def bundled_names() -> list[str]:
    return sorted(p.stem for p in bundled_dir().iterdir() if p.suffix in SUFFIXES)


def is_path(ref: str) -> bool:
    """A profile reference that names a file rather than a bundled profile."""
    return "/" in ref or ref.endswith(SUFFIXES)


def get_profile(ref: str) -> PerfProfile:
    """A bundled profile by name, or a profile file by path; ProfileError/KeyError if bad."""
    if is_path(ref):
        return load_file(Path(ref))
    if ref not in bundled_names():
        raise KeyError(f"unknown sim profile {ref!r}; known: {bundled_names()} or a file path")
    return _bundled(ref)


@cache
def _bundled(name: str) -> PerfProfile:
    for suffix in SUFFIXES:
        path = bundled_dir() / f"{name}{suffix}"
        if path.is_file():
            profile = load_file(path)
            if profile.name != name:
                raise ProfileError(f"{path}: name {profile.name!r} must match the file name")
            return profile
    raise KeyError(name)


def load_file(path: Path, _seen: tuple[Path, ...] = ()) -> PerfProfile:
    """Parse and validate one profile file (following ``extends``)."""
    path = path.resolve()
    if path in _seen:
        raise ProfileError(f"{path}: 'extends' loops back to itself")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a mapping")
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise ProfileError(f"{path}: unknown keys {sorted(unknown)}; allowed: {sorted(TOP_KEYS)}")
    parent = data.get("extends")
    if parent is None:
        base = PerfProfile(name=path.stem)
    elif is_path(str(parent)):
        base = load_file((path.parent / str(parent)), (*_seen, path))
    else:
        base = get_profile(str(parent))
    changes: dict[str, Any] = {"name": str(data.get("name") or path.stem), "calibration": ()}
    for key in ("description", "assumptions"):
        if key in data:
            changes[key] = str(data[key]).strip()
    if "calibration_context" in data:
        where = "calibration_context"
        changes[where] = _number(path, where, data[where])
    for section, mapping in SECTIONS.items():
        values = data.get(section) or {}
        if not isinstance(values, dict):
            raise ProfileError(f"{path}: section {section!r} must be a mapping")
        for key, value in values.items():
            if key not in mapping:
                raise ProfileError(
                    f"{path}: unknown key {section}.{key}; allowed: {sorted(mapping)}"
                )
            field = mapping[key]
            if field in ("rejection_scale", "ngram_match_rate"):
                value = _rejection_scale(path, f"{section}.{key}", getattr(base, field), value)
            changes[field] = _coerce(path, f"{section}.{key}", field, value)
    points = data.get("calibration") or []
    if not isinstance(points, list):
        raise ProfileError(f"{path}: calibration must be a list")
    changes["calibration"] = tuple(_point(path, i, p) for i, p in enumerate(points))
    return dataclasses.replace(base, **changes)


def _rejection_scale(
    path: Path, where: str, parent: tuple[tuple[str, float], ...], value: Any
) -> tuple[tuple[str, float], ...]:
    """The parent's table with this file's categories replaced."""
    if not isinstance(value, dict):
        raise ProfileError(f"{path}: {where} must be a mapping of category to scale")
    table = dict(parent)
    for category, scale in value.items():
        if category not in CATEGORIES:
            raise ProfileError(
                f"{path}: {where}: unknown category {category!r}; known: {list(CATEGORIES)}"
            )
        table[str(category)] = _number(path, f"{where}.{category}", scale)
    return tuple(table.items())


def _coerce(path: Path, where: str, field: str, value: Any) -> Any:
    kind = _FIELD_TYPES[field]
    if kind == "tuple[tuple[str, float], ...]":
        return value  # validated by _rejection_scale
    if kind == "str":
        if not isinstance(value, str):
            raise ProfileError(f"{path}: {where} must be a string, got {value!r}")
        return value
    if kind == "tuple[float, ...]":
        if not isinstance(value, list):
            raise ProfileError(f"{path}: {where} must be a list of probabilities")
        probs = tuple(_number(path, where, v) for v in value)
        if any(not 0 <= v <= 1 for v in probs):
            raise ProfileError(f"{path}: {where} values must lie in [0, 1]")
        return probs
    number = _number(path, where, value)
    if kind == "int":
        if number != int(number):
            raise ProfileError(f"{path}: {where} must be an integer, got {value!r}")
        return int(number)
    return number


def _number(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{path}: {where} must be a number, got {value!r}")
    if value < 0:
        raise ProfileError(f"{path}: {where} must be >= 0, got {value!r}")
    return float(value)


def _point(path: Path, index: int, raw: Any) -> CalibrationPoint:
    where = f"calibration[{index}]"
    if not isinstance(raw, dict) or set(raw) - POINT_KEYS or "label" not in raw:
        raise ProfileError(f"{path}: {where} needs a label and only keys {sorted(POINT_KEYS)}")
    fields = dict(raw)
    spec = fields.get("spec")
    if spec is not None:
        if not isinstance(spec, dict) or set(spec) != SPEC_KEYS:
            raise ProfileError(f"{path}: {where}.spec needs exactly {sorted(SPEC_KEYS)}")
        try:
            fields["spec"] = SpecConfig(
                str(spec["algorithm"]), int(spec["steps"]), int(spec["topk"]),
                int(spec["draft_tokens"]),
            )  # fmt: skip
        except ValueError as exc:
            raise ProfileError(f"{path}: {where}.spec: {exc}") from None
    if fields.get("tok_s") is None and fields.get("accept_length") is None:
        raise ProfileError(f"{path}: {where} needs tok_s or accept_length")
    if "context" in fields and fields["context"] is not None:
        fields["context"] = _number(path, f"{where}.context", fields["context"])
    if fields.get("category", "random") not in CATEGORIES:
        raise ProfileError(
            f"{path}: {where}.category must be one of {list(CATEGORIES)}, "
            f"got {fields['category']!r}"
        )
    try:
        return CalibrationPoint(**fields)
    except TypeError as exc:
        raise ProfileError(f"{path}: {where}: {exc}") from None
