"""The variants a policy verification launches: the engine's steps 0 (before the export),
the exported tiers and sglang's own default tiers (after it).

They share everything but the tiers with the chains the export is built from (the
draft model, the spec v2 path, env and extra flags), so the verification compares
the adaptive runtime with the very servers it summarises.
"""

from __future__ import annotations

from specsweep.analysis.adaptive_export import TierExport
from specsweep.config import Variant
from specsweep.config.adaptive import ADAPTIVE_ALGORITHMS
from specsweep.errors import PolicyExportRefused


def _setup(chain: Variant) -> dict[str, object]:
    return {
        "algorithm": chain.algorithm,
        "draft_model_path": chain.draft_model_path,
        "spec_v2": chain.spec_v2,
        "env": chain.env,
        "extra_args": chain.extra_args,
        "max_running_requests": chain.max_running_requests,
    }


def pinned_zero_variant(variants: list[Variant], chains: list[str]) -> Variant | None:
    """The chains' setup with every tier [0] (sglang's speculative worker drafting nothing),
    named `<algorithm>-adaptive-steps0`; None when the sweep has no topk-1 chain to copy.
    `chains` (labels) picks the family, as the export does."""
    found = [
        v
        for v in variants
        if v.adaptive is None
        and v.algorithm in ADAPTIVE_ALGORITHMS
        and v.resolved_topk == 1
        and (not chains or v.label in chains)
    ]
    if not found:
        return None
    setup = _setup(found[0])
    name = f"{str(setup['algorithm']).lower()}-adaptive-steps0" + (
        "-v2" if found[0].uses_spec_v2 else ""
    )
    return Variant(name=name, adaptive={"tiers": {1: [0]}}, **setup)  # type: ignore[arg-type]


def verification_variants(
    variants: list[Variant], export: TierExport, default_tiers: bool = True
) -> list[Variant]:
    """The exported config as a variant, then (optionally) sglang's default tiers with the
    same setup; those already among `variants` are left out (measured already)."""
    sources = [
        v
        for v in variants
        if v.label in export.built_from and not v.is_baseline and v.adaptive is None
    ]
    if not sources:
        raise PolicyExportRefused(
            f"the run's chains {', '.join(export.built_from)} are not variants of this "
            "configuration: verify with the configuration the run was measured with"
        )
    common = _setup(sources[0])
    out = [Variant(**common, adaptive=export.adaptive_spec())]  # type: ignore[arg-type]
    if default_tiers:
        out.append(Variant(**common, adaptive=True))  # type: ignore[arg-type]
    labels = {v.label for v in variants}
    return [v for v in out if v.label not in labels]
