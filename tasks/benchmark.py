"""The per-level benchmark task."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from specsweep.config.load import Shape
from specsweep.pipeline import VariantServer
from specsweep.progress import OffTheLoop, throttled


@task(name="calibrate-drift", cache_policy=NO_CACHE)
def calibrate_drift(server: VariantServer) -> dict[int, float] | None:
    """This run's drift on the target (loadgen/calibration.py), before its first level:
    {concurrency: drift}; None when the calibration failed (the levels then assume +-1.5%)."""
    bands = server.calibrate_drift()
    if bands is None:
        return None
    for calibration in bands.points:
        get_run_logger().info(
            "%s: drift %.2f%% per pass at c=%d (CV %.2f%% over %d passes, yield %.2f%%)",
            server.label,
            100 * calibration.drift,
            calibration.concurrency,
            100 * calibration.between_cv,
            calibration.df + 1,
            100 * calibration.yield_cv,
        )
    return {p.concurrency: p.drift for p in bands.points}


@task(name="benchmark-level", cache_policy=NO_CACHE, task_run_name="{cell}")
def benchmark_level(
    server: VariantServer, concurrency: int, shape: Shape | None = None, cell: str = ""
) -> dict[str, Any]:
    """`cell`: its name in the UI (c=16, or in4096-out256 c=16 in a run of several shapes)."""
    logger = get_run_logger()
    cell = cell or server.cell_name(shape, concurrency)
    artifact_id = create_progress_artifact(
        0.0, description=f"run {server.ctx.run_id}: {server.label} at {cell}"
    )

    def update(done: int, total: int) -> None:
        update_progress_artifact(artifact_id, 100.0 * done / max(total, 1))

    # an API call per update would stall the measuring event loop: a thread sends them
    with OffTheLoop(update) as report:
        row = server.benchmark_level(concurrency, throttled(report, min_interval_s=1.0), shape)
    accept = row["accept_length"]
    logger.info(
        "%s %s: %.1f tok/s out, TTFT p50 %.1f ms, ITL p50 %.2f ms%s, %d/%d ok [%s]",
        server.label,
        cell,
        row["output_throughput"],
        row["ttft_ms_p50"],
        row["itl_ms_p50"],
        f", accept {accept:.2f}" if accept is not None else "",
        row["completed"],
        row["completed"] + row["failed"],
        row["status"],
    )
    return row
