"""Measure more while a variant's server is up, until its open decisions settle."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from specsweep.analysis.sequential import MeasureMore
from specsweep.config.load import Shape
from specsweep.pipeline import VariantServer


@task(name="measure-to-decide", cache_policy=NO_CACHE, task_run_name="decide {cell}")
def measure_more(
    server: VariantServer, step: MeasureMore, shape: Shape | None = None, cell: str = ""
) -> dict[str, Any]:
    """`step.passes` more passes at one level, pooled with its earlier ones."""
    row = server.measure_more(step, shape)
    get_run_logger().info(
        "%s %s: %d more pass(es) to settle it (%s): now %.1f tok/s out over %d passes, "
        "95%% %.1f to %.1f",
        server.label, cell, step.passes, step.reason, row["output_throughput"],
        row["repeats"], row["output_throughput_lo"], row["output_throughput_hi"],
    )  # fmt: skip
    return row
