"""The one sweep implementation: every variant of a config, then the summary.

The step and topk sweeps are presets of this flow (they pick which section of
the config to expand); all three share `run_sweep`, so resume, failure
reporting and the summary artifact behave identically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import flow, get_run_logger

from flows.benchmark_variant import benchmark_variant
from flows.hooks import STOP_SERVERS_HOOKS
from flows.run_records import begin_run, finish_run, first_line, run_config
from specsweep.config import SweepConfig, Variant
from specsweep.config.plan import sweep_variants
from specsweep.errors import SpecsweepError
from tasks.policy import export_policy, steps_zero_reference
from tasks.search import plan_next_launch
from tasks.server import check_sglang_version


def run_sweep(
    config: SweepConfig,
    variants: list[Variant],
    kind: str,
    run_id: str | None = None,
    force: bool = False,
    publish: bool = True,
) -> dict[str, Any]:
    """Benchmark each variant in its own subflow; a failed variant is recorded and the
    sweep goes on (unless config.stop_on_failure), and nothing measured is ever lost."""
    logger = get_run_logger()
    check_sglang_version(config, variants)  # a flag the target's sglang lacks: before any launch
    ctx, started = begin_run(config, variants, kind, run_id, config.target.name)
    errors: dict[str, str] = {}
    skipped: list[str] = []

    def measure(batch: list[Variant]) -> None:
        for variant in batch:
            if errors and config.stop_on_failure:
                skipped.append(variant.label)
                continue
            state = benchmark_variant(config, variant, ctx, force=force, return_state=True)
            if state.is_failed() or state.is_crashed():
                exc = state.result(raise_on_failure=False)
                errors[variant.label] = first_line(exc) if exc is not None else str(state.message)
                logger.error("variant %s failed: %s", variant.label, errors[variant.label])

    search_stop = None
    if config.search.adaptive:
        search_stop = search(config, variants, ctx.run_id, ctx.target, measure, errors)
    else:
        measure(variants)
    if config.verify_policy is not None and not (errors and config.stop_on_failure):
        # the engine's steps 0, then the run's answer as SGLang adaptive tiers (exported with
        # it as steps 0), launched and measured like any variant
        zero = steps_zero_reference(config, variants)
        measure(zero)
        extra = export_policy(config, [*variants, *zero], ctx.run_id)
        measure(extra)
        variants = [*variants, *zero, *extra]
    if skipped:
        logger.warning("stop_on_failure: skipped %s", ", ".join(skipped))
    return finish_run(config, ctx, variants, errors, started, kind, publish, skipped, search_stop)


def search(
    config: SweepConfig,
    candidates: list[Variant],
    run_id: str,
    target: str,
    measure: Callable[[list[Variant]], None],
    errors: dict[str, str],
) -> str:
    """search: adaptive: launch one variant at a time, as the planner chooses from what the
    run has stored, until it stops; returns why it stopped (the runs row keeps it)."""
    tried: set[str] = set()
    while True:
        if errors and config.stop_on_failure:
            return "stopped: a variant failed (stop_on_failure)"
        launch, why, _ = plan_next_launch(config, candidates, run_id, target, tried)
        if launch is None:
            return why
        tried.add(launch.label)
        measure([launch])


def _run_name() -> str:
    config = run_config()
    try:
        labels = [v.label for v in sweep_variants(config)]
    except SpecsweepError:
        labels = ["invalid"]
    shown = ",".join(labels[:4]) + (f",+{len(labels) - 4}" if len(labels) > 4 else "")
    return f"matrix-sweep/{config.target.name}/{shown}"


@flow(name="matrix-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def matrix_sweep(
    config: SweepConfig, run_id: str | None = None, force: bool = False, publish: bool = True
) -> dict[str, Any]:
    """Run every variant the config describes (its sweep sections and explicit variants).

    Args:
        config: Target, server, load and the variants to compare; the baseline always runs.
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
        publish: Render the report and publish the answer (policy, pivots) as artifacts.
    """
    variants = sweep_variants(config)  # every rule checked before any launch
    return run_sweep(config, variants, "matrix-sweep", run_id, force, publish)
