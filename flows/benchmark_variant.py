"""One variant's life: kill stale -> launch -> wait for health -> (the run's drift calibration) ->
each level -> teardown."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from specsweep.analysis.sequential import MeasureMore
from specsweep.config import SweepConfig, Variant
from specsweep.config.load import Shape
from specsweep.errors import ServerDiedError
from specsweep.flows.hooks import STOP_SERVERS_HOOKS
from specsweep.flows.prefect_secrets import use_prefect_secrets
from specsweep.flows.target_lock import target_lock
from specsweep.pipeline import VariantServer
from specsweep.results.rows import RunContext
from specsweep.tasks.benchmark import benchmark_level, calibrate_drift
from specsweep.tasks.decide import measure_more
from specsweep.tasks.search import skip_level
from specsweep.tasks.server import (
    kill_stale_processes,
    launch_server,
    teardown_server,
    wait_for_health,
)


def variant_label(value: object) -> str:
    """A variant parameter's label (the API hands over plain dicts)."""
    return value.label if isinstance(value, Variant) else Variant.model_validate(value).label


def _run_name() -> str:
    label = variant_label(flow_run.parameters.get("variant"))
    return f"variant/{label}"


def _cell(row: dict[str, Any]) -> tuple[object, object]:
    return row.get("shape"), row.get("concurrency")


def measure_to_decide(server: VariantServer, shapes: list[Shape]) -> list[dict[str, Any]]:
    """Extra passes on this launch until nothing open involves this variant at any of its
    shapes or the run's load.decide_budget_s is spent (analysis/sequential.py).

    The shapes take turns, one step each: a shape measured to the end before the next
    would spend the budget's precision share on its own levels and leave the next
    shape's reference as wide as it came (a loaded machine, two shapes: the first shape's
    baseline pooled 16 passes, the second's stayed at ±16%)."""
    rows: list[dict[str, Any]] = []
    waiting = list(shapes)
    while waiting:
        for shape in list(waiting):
            step = server.next_to_decide(shape)
            if isinstance(step, MeasureMore):
                cell = server.cell_name(shape, step.concurrency)
                rows.append(measure_more(server, step, shape, cell))
                continue
            waiting.remove(shape)
            who = f"{server.label} {shape.label}" if server.load.multi_shape else server.label
            get_run_logger().info("%s: %s", who, step.reason)
    return rows


def start(server: VariantServer, attempts: int, force: bool) -> None:
    """Kill stale, launch, wait for health; relaunch after a transient death only."""
    for attempt in range(1, attempts + 1):
        kill_stale_processes(server, force=force)
        launch_server(server)
        try:
            wait_for_health(server)
            return
        except ServerDiedError as exc:
            if not exc.transient or attempt == attempts:
                raise
            get_run_logger().warning(
                "%s died of a transient cause (attempt %d of %d); cleaning up and "
                "relaunching: %s", server.label, attempt, attempts, str(exc).splitlines()[0],
            )  # fmt: skip
            teardown_server(server)


@flow(name="benchmark-variant", flow_run_name=_run_name, log_prints=True, **STOP_SERVERS_HOOKS)
def benchmark_variant(
    config: SweepConfig, variant: Variant, ctx: RunContext, force: bool = False
) -> list[dict[str, Any]]:
    """Benchmark one variant at every level; the server is torn down whatever happens."""
    use_prefect_secrets()
    server = VariantServer.for_variant(config, variant, ctx)
    todo = server.levels_to_measure()
    rows: list[dict[str, Any]] = []
    # a resumed search: cells its rule already skipped need no server
    while todo and (reason := server.skip_reason(config.search, todo[0][1], todo[0][0])):
        shape, concurrency = todo.pop(0)
        rows.append(
            skip_level(server, concurrency, reason, shape, server.cell_name(shape, concurrency))
        )
    if not todo:
        get_run_logger().info(
            "%s: every level already measured on %s in run %s",
            variant.label, ctx.target, ctx.run_id,
        )  # fmt: skip
        return rows
    # The target lock spans kill-stale .. teardown: no other flow touches these GPUs meanwhile.
    with target_lock(config), server:
        try:
            start(server, config.server.start_attempts, force)
            if server.needs_calibration:  # the run's first server on this target
                calibrate_drift(server)
            for shape, concurrency in todo:  # every shape on this one launch
                if (reason := server.skip_reason(config.search, concurrency, shape)) is not None:
                    cell = server.cell_name(shape, concurrency)
                    rows.append(skip_level(server, concurrency, reason, shape, cell))
                    continue
                row = benchmark_level(
                    server, concurrency, shape, server.cell_name(shape, concurrency)
                )
                rows.append(row)
                if row["status"] != "ok":
                    server.ensure_alive(f"the level at {server.cell_name(shape, concurrency)}")
            # while the server is up: more passes where a decision is still open
            for row in measure_to_decide(server, list(dict.fromkeys(s for s, _ in todo))):
                rows = [r for r in rows if _cell(r) != _cell(row)] + [row]
        finally:
            teardown_server(server)  # the step in the UI; the `with` is the safety net
    return rows
