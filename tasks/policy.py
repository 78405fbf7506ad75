"""The policy export as a Prefect task: the run's measured answer as SGLang adaptive tiers,
published as an artifact (the JSON and the command that deploys it), and the variants
that verify it."""

from __future__ import annotations

import json

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from specsweep.analysis.adaptive_export import export_adaptive
from specsweep.analysis.verification_plan import pinned_zero_variant, verification_variants
from specsweep.config import SweepConfig, Variant
from specsweep.config.command import command_for
from specsweep.errors import PolicyExportRefused
from specsweep.report.prose import fit_text, paragraph
from specsweep.results.store import ResultsStore

EXPORT_KEY = "specsweep-adaptive-export"


@task(name="plan-steps-zero-reference", cache_policy=NO_CACHE)
def steps_zero_reference(config: SweepConfig, variants: list[Variant]) -> list[Variant]:
    """The engine's steps 0 as a variant to measure before the export (when asked)."""
    spec = config.verify_policy
    assert spec is not None
    if not spec.pinned_zero:
        return []
    zero = pinned_zero_variant(variants, spec.chains)
    if zero is None:
        get_run_logger().warning("no topk-1 chain in the sweep: steps 0 is not measured")
        return []
    return [zero]


@task(name="export-policy", cache_policy=NO_CACHE)
def export_policy(config: SweepConfig, variants: list[Variant], run_id: str) -> list[Variant]:
    """The variants to launch for the verification; none (with the reason logged and
    published) when the run's measurements cannot be exported."""
    logger = get_run_logger()
    spec = config.verify_policy
    assert spec is not None
    levels = ResultsStore(config.results_dir).read_levels(run_id)
    if config.load.multi_shape:  # sglang's tiers key on batch size: built at the first shape
        levels = levels[levels["shape"] == config.load.shape.label]
    try:
        export = export_adaptive(levels, variants=spec.chains or None, tie_margin=spec.tie_margin)
        extra = verification_variants(variants, export, spec.default_tiers)
    except PolicyExportRefused as exc:
        logger.warning("policy not exported, nothing to verify: %s", exc)
        create_markdown_artifact(
            fit_text(f"# Adaptive export refused\n\n{paragraph(str(exc))}\n"),
            key=EXPORT_KEY,
            description=f"run {run_id}",
        )
        return []
    text = json.dumps(export.sglang_config(), indent=2, sort_keys=True)
    commands = [command_for(config, v).shell() for v in extra]
    lines = "\n".join(f"- {line}" for line in export.describe())
    shown = "\n\n".join(f"```\n{c}\n```" for c in commands)
    create_markdown_artifact(
        fit_text(
            f"# Adaptive tiers exported from run {run_id}\n\n{lines}\n\n```json\n{text}\n```\n\n"
            f"Verified by launching:\n\n{shown}\n"
        ),
        key=EXPORT_KEY,
        description=f"run {run_id}",
    )
    logger.info(
        "exported adaptive tiers %s; verifying with %s",
        export.adaptive_spec().describe(),
        ", ".join(v.label for v in extra) or "nothing new (already measured)",
    )
    return extra
