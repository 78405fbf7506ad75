"""The per-level benchmark task."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from specsweep import pipeline
from specsweep.config import SweepConfig, Variant
from specsweep.progress import throttled
from specsweep.results.rows import RunContext, ServerFacts


@task(name="benchmark-level", cache_policy=NO_CACHE, task_run_name="c={concurrency}")
def benchmark_level(
    config: SweepConfig,
    ctx: RunContext,
    variant: Variant,
    facts: ServerFacts,
    concurrency: int,
) -> dict[str, Any]:
    logger = get_run_logger()
    artifact_id = create_progress_artifact(
        0.0, description=f"run {ctx.run_id}: {variant.label} at concurrency {concurrency}"
    )

    def update(done: int, total: int) -> None:
        update_progress_artifact(artifact_id, 100.0 * done / max(total, 1))

    on_progress = throttled(update, min_interval_s=1.0)
    row = pipeline.measure_level(config, ctx, variant, facts, concurrency, on_progress)
    accept = row["accept_length"]
    logger.info(
        "%s c=%d: %.1f tok/s out, TTFT p50 %.1f ms, ITL p50 %.2f ms%s, %d/%d ok [%s]",
        variant.label,
        concurrency,
        row["output_throughput"],
        row["ttft_ms_p50"],
        row["itl_ms_p50"],
        f", accept {accept:.2f}" if accept is not None else "",
        row["completed"],
        row["completed"] + row["failed"],
        row["status"],
    )
    return row
