"""One variant's life: kill stale -> launch -> wait for health -> each level -> teardown."""

from __future__ import annotations

import time
from typing import Any

from prefect import Flow, flow, get_run_logger
from prefect.client.schemas.objects import FlowRun
from prefect.logging.loggers import flow_run_logger
from prefect.runtime import flow_run
from prefect.states import State

from specsweep import pipeline
from specsweep.config import SweepConfig, Variant
from specsweep.errors import ServerDiedError
from specsweep.phases import Phases
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore
from tasks.benchmark import benchmark_level
from tasks.server import kill_stale_processes, launch_server, teardown_server, wait_for_health
from tasks.target_lock import target_lock


def variant_label(value: object) -> str:
    """A variant parameter's label (the API hands over plain dicts)."""
    return value.label if isinstance(value, Variant) else Variant.model_validate(value).label


def _run_name() -> str:
    label = variant_label(flow_run.parameters.get("variant"))
    return f"variant/{label}"


def kill_recorded_servers(flow: Flow, flow_run: FlowRun, state: State) -> None:
    """Cancellation/crash hook: the `finally` may never run, the launch record still can.

    Prefect runs these hooks in the runner's process when a run is cancelled or
    crashes, so the handle is gone; the target's launch record and the port are
    what identify the server.
    """
    config = flow_run.parameters.get("config")
    if not isinstance(config, SweepConfig):
        config = SweepConfig.model_validate(config)
    report = pipeline.kill_stale_servers(config)
    flow_run_logger(flow_run, flow).warning(
        "flow run %s: %s; stopped server processes %s",
        flow_run.name, state.name, report.killed_pids or "none left",
    )  # fmt: skip


@flow(
    name="benchmark-variant",
    flow_run_name=_run_name,
    log_prints=True,
    on_cancellation=[kill_recorded_servers],
    on_crashed=[kill_recorded_servers],
)
def benchmark_variant(
    config: SweepConfig, variant: Variant, ctx: RunContext, force: bool = False
) -> list[dict[str, Any]]:
    """Benchmark one variant at every level; the server is torn down whatever happens."""
    logger = get_run_logger()
    store = ResultsStore(config.results_dir)
    target = config.target.name
    measured = [
        c for c in config.load.concurrency if store.has_level(ctx.run_id, variant.label, c, target)
    ]
    todo = [c for c in config.load.concurrency if c not in measured]
    if not todo:
        logger.info(
            "%s: every level already measured on %s in run %s", variant.label, target, ctx.run_id
        )
        return []
    rows: list[dict[str, Any]] = []
    handle = None
    phases = Phases()
    # The target lock spans kill-stale .. teardown: no other flow touches these GPUs meanwhile.
    with target_lock(config):
        # The server's life on this target, recorded before anything starts: a host lost
        # mid-variant still leaves when its server began.
        held: dict[str, float] = {"held_from_unix": time.time()}
        store.write_phases(ctx.run_id, variant.label, target, held)
        try:
            for attempt in range(1, config.server.start_attempts + 1):
                with phases.timed("kill_stale_s"):
                    kill_stale_processes(config, force=force)
                with phases.timed("launch_to_ready_s"):
                    handle = launch_server(config, variant, ctx.run_id)
                    try:
                        facts = wait_for_health(config, handle)
                        break
                    except ServerDiedError as exc:
                        if not exc.transient or attempt == config.server.start_attempts:
                            raise
                        logger.warning(
                            "%s died of a transient cause (attempt %d of %d); cleaning up "
                            "and relaunching: %s", variant.label, attempt,
                            config.server.start_attempts, str(exc).splitlines()[0],
                        )  # fmt: skip
                        teardown_server(config, handle)
                        handle = None
            for concurrency in todo:
                with phases.timed("benchmark_s"):
                    row = benchmark_level(config, ctx, variant, facts, concurrency)
                rows.append(row)
                if row["status"] != "ok":
                    pipeline.ensure_alive(config, handle, f"the level at concurrency {concurrency}")
        finally:
            if handle is not None:
                with phases.timed("teardown_s"):
                    teardown_server(config, handle)
            held["held_until_unix"] = time.time()
            store.write_phases(ctx.run_id, variant.label, target, phases.seconds | held)
    return rows
