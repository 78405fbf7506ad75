"""The variants a policy verification launches: the exported tiers (and sglang's own).

They share everything but the tiers with the chains the export was built from (the
draft model, the spec v2 path, env and extra flags), so the verification compares
the adaptive runtime with the very servers it summarises.
"""

from __future__ import annotations

from specsweep.analysis.adaptive_export import TierExport
from specsweep.config import Variant
from specsweep.errors import PolicyExportRefused


def verification_variants(
    variants: list[Variant], export: TierExport, default_tiers: bool = True
) -> list[Variant]:
    """The exported config as a variant, then (optionally) sglang's default tiers with the
    same setup; those already among `variants` are left out (measured already)."""
    sources = [v for v in variants if v.label in export.built_from and not v.is_baseline]
    if not sources:
        raise PolicyExportRefused(
            f"the run's chains {', '.join(export.built_from)} are not variants of this "
            "configuration: verify with the configuration the run was measured with"
        )
    ref = sources[0]
    common = {
        "algorithm": ref.algorithm,
        "draft_model_path": ref.draft_model_path,
        "spec_v2": ref.spec_v2,
        "env": ref.env,
        "extra_args": ref.extra_args,
        "max_running_requests": ref.max_running_requests,
    }
    out = [Variant(**common, adaptive=export.adaptive_spec())]
    if default_tiers:
        out.append(Variant(**common, adaptive=True))
    labels = {v.label for v in variants}
    return [v for v in out if v.label not in labels]
