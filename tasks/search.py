"""The adaptive search's steps as tasks: the next launch (with the model's predictions
kept apart from the measurements) and a level the search chose not to measure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from specsweep.analysis.baselines import kind_frames
from specsweep.config import SweepConfig, Variant
from specsweep.config.load import Shape
from specsweep.pipeline import VariantServer
from specsweep.results.store import ResultsStore
from specsweep.search.planner import RunSoFar, next_step, record_final, record_launch


@task(name="plan-next-launch", cache_policy=NO_CACHE)
def plan_next_launch(
    config: SweepConfig,
    candidates: list[Variant],
    run_id: str,
    target: str,
    tried: set[str],
    pending: set[str] | None = None,
) -> tuple[Variant | None, str, bool]:
    """Fit the model on what the run measured and choose the next variant; on stopping,
    store the final predictions of every variant with why it was (not) launched.

    Returns (the variant to launch, why, done): no variant and not done means wait for the
    variants in flight (a fleet).

    A fleet run with a baseline plan (the hosts table) is fitted on its first GPU kind's
    rows as the answer sees them: the reference's baseline, and each variant from one host
    of that kind, put on the reference's scale where that host measured its own baseline
    (`analysis.baselines.kind_frames`); raw rows would mix hosts of different speeds."""
    logger = get_run_logger()
    store = ResultsStore(config.results_dir)
    so_far = RunSoFar.read(store, run_id)
    frames = kind_frames(so_far.levels, store.read_host_plans(run_id))
    if frames:
        so_far = replace(so_far, levels=next(iter(frames.values())))
    # several shapes: every cell counts from the start; one: the rows' own shape
    shapes = [s.label for s in config.load.shape_list()] if config.load.multi_shape else None
    step = next_step(
        config.search, candidates, config.load.concurrency, so_far, tried, pending or set(),
        shapes=shapes,
    )  # fmt: skip
    if step.launch is not None:
        record_launch(store, run_id, target, step)
        logger.info("search: launch %s", step.why)
    elif step.done:
        record_final(store, run_id, target, step)
        launched = sum(s.launched for s in step.standings)
        logger.info(
            "search: stopped after %d of %d variants: %s", launched, len(candidates), step.why
        )
    return step.launch, step.why, step.done


@task(name="skip-level", cache_policy=NO_CACHE, task_run_name="{cell}")
def skip_level(
    server: VariantServer,
    concurrency: int,
    reason: str,
    shape: Shape | None = None,
    cell: str = "",
) -> dict[str, Any]:
    """Record the cell as skipped (no number), so the answer and a resume see it."""
    get_run_logger().info("%s at %s %s", server.label, server.cell_name(shape, concurrency), reason)
    return server.skip_level(concurrency, reason, shape)
