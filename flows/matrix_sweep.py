"""The one sweep implementation: every variant of a config, then the summary.

The step and topk sweeps are presets of this flow (they pick which section of
the config to expand); all three share `run_sweep`, so resume, failure
reporting and the summary artifact behave identically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.runtime import flow_run

from specsweep.config import SweepConfig, Variant
from specsweep.config.forms import MatrixSweepForm, sweep_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import SpecsweepError
from specsweep.flows.benchmark_variant import benchmark_variant
from specsweep.flows.hooks import STOP_SERVERS_HOOKS
from specsweep.flows.run_records import begin_run, finish_run, first_line
from specsweep.tasks.policy import export_policy, steps_zero_reference
from specsweep.tasks.search import plan_next_launch
from specsweep.tasks.server import check_sglang_version


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
    # a flag the target's sglang lacks: before any launch; the runs row says which version
    sglang = check_sglang_version(config, variants)
    ctx, started = begin_run(config, variants, kind, run_id, config.target.name, sglang)
    errors: dict[str, str] = {}
    skipped: list[str] = []

    def measure(batch: list[Variant]) -> None:
        for variant in batch:
            if errors and config.stop_on_failure:
                skipped.append(variant.label)
                continue
            # Prefect gives a subflow run only the tags of the `tags` context, not its parent's
            with tags(*variant_tags(config, ctx.run_id, variant.label)):
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
    return finish_run(
        config, ctx, variants, errors, started, kind, publish, skipped, search_stop, sglang
    )


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


# --- run names and tags: one pure function per flow, from the run's parameters -----------
# The deployments' worker (deployments/run_labels.py) names a run with these as soon as it
# is created (from the UI form, the CLI or the nightly schedule); the flow's own
# flow_run_name calls the same function when the run starts, so the two always agree.

NAME_ITEMS = 4  # list items a run name shows before "+N"


def short_list(items: Sequence[object], keep: int = NAME_ITEMS) -> str:
    """'1,2,4,8,+3': the first items of a list and how many more (names stay short)."""
    shown = ",".join(map(str, items[:keep]))
    return shown + (f",+{len(items) - keep}" if len(items) > keep else "")


def named_config(parameters: Mapping[str, Any]) -> SweepConfig | None:
    """A run's config parameter (the file's shape or a form's), validated; None when missing
    or invalid: a name must never fail a run (the flow's own parameter check says what is
    wrong)."""
    try:
        return sweep_config(parameters.get("config"))
    except (ValueError, TypeError, SpecsweepError):
        return None


def raw_target(parameters: Mapping[str, Any]) -> str | None:
    """The target name as typed, for a config that does not validate."""
    config = parameters.get("config")
    target = config.get("target") if isinstance(config, Mapping) else None
    name = target.get("name") if isinstance(target, Mapping) else None
    return str(name) if name else None


def load_part(config: SweepConfig) -> str:
    """'c=1,2,4' and, with several load shapes, '/in512-out256,in4096-out256'."""
    part = f"c={short_list(config.load.concurrency)}"
    shapes = config.load.shape_list()
    return part + (f"/{short_list([s.label for s in shapes])}" if len(shapes) > 1 else "")


def sweep_run_name(
    kind: str, parameters: Mapping[str, Any], what: Callable[[SweepConfig], str]
) -> str:
    """'<kind>/<target>/<what>/c=<levels>[/<shapes>]', or '<kind>/<target>/invalid-config'."""
    config = named_config(parameters)
    if config is None:
        return f"{kind}/{raw_target(parameters) or '?'}/invalid-config"
    return f"{kind}/{config.target.name}/{what(config)}/{load_part(config)}"


def preset_run_name(
    kind: str, label: str, values: Callable[[SweepConfig], Sequence[object] | None]
) -> Callable[[Mapping[str, Any], datetime | None, str | None], str]:
    """A preset's name function: '<kind>/<target>/<label>=1,2,3/c=1,2,4' (+ the shapes when
    there are several), from the list its section sweeps ('?' without the section); the
    scheduled time and timezone are not part of a sweep's name."""

    def name(
        parameters: Mapping[str, Any],
        scheduled: datetime | None = None,
        timezone: str | None = None,
    ) -> str:
        def what(config: SweepConfig) -> str:
            swept = values(config)
            return f"{label}={short_list(swept) if swept is not None else '?'}"

        return sweep_run_name(kind, parameters, what)

    return name


def run_tags(parameters: Mapping[str, Any]) -> list[str]:
    """`target:<name>` and, when the run names one, `run:<run_id>`: what a run is found by."""
    config = named_config(parameters)
    target = config.target.name if config is not None else raw_target(parameters)
    run_id = parameters.get("run_id")
    found = []
    if target:
        found.append(f"target:{target}")
    if run_id:
        found.append(f"run:{run_id}")
    return found


def variant_tags(config: SweepConfig, run_id: str, label: str) -> list[str]:
    """A benchmark-variant subflow's tags: its parent run's, the target, the run id (the
    one the sweep resolved) and `variant:<label>`."""
    own = {f"target:{config.target.name}", f"run:{run_id}", f"variant:{label}"}
    return sorted({*flow_run.get_tags(), *own})


def matrix_sweep_run_name(
    parameters: Mapping[str, Any],
    scheduled: datetime | None = None,
    timezone: str | None = None,
) -> str:
    """'matrix-sweep/<target>/<variant labels>/c=<levels>' (the scheduled time is not part
    of it: a sweep is named by what it runs)."""

    def labels(config: SweepConfig) -> str:
        try:
            return short_list([v.label for v in sweep_variants(config)])
        except SpecsweepError:
            return "invalid"

    return sweep_run_name("matrix-sweep", parameters, labels)


def _run_name() -> str:
    return matrix_sweep_run_name(flow_run.parameters)


@flow(name="matrix-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def matrix_sweep(
    config: MatrixSweepForm, run_id: str | None = None, force: bool = False, publish: bool = True
) -> dict[str, Any]:
    """Run every variant the config describes (its sweep sections and explicit variants).

    Args:
        config: Target, server, load and the variants to compare (a SweepConfig, its file's
            mapping or the form's values); the baseline always runs.
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
        publish: Render the report and publish the answer (policy, pivots) as artifacts.
    """
    sweep = config.sweep
    variants = sweep_variants(sweep)  # every rule checked before any launch
    return run_sweep(sweep, variants, "matrix-sweep", run_id, force, publish)
