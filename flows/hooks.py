"""Cancellation and crash hooks: stop a run's servers when its `finally` cannot run.

Prefect runs these in the runner's process when a run is cancelled or crashes,
so the VariantServer is gone; the target's launch record and the port are what
identify the server. They are the one place besides a flow's own parameters
that sees a whole config.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from prefect import Flow
from prefect.client.schemas.objects import FlowRun
from prefect.logging.loggers import flow_run_logger
from prefect.states import State

from specsweep.config import SweepConfig
from specsweep.config.fleet import Fleet, config_for_host, current_host
from specsweep.config.forms import sweep_config
from specsweep.flows.prefect_secrets import use_prefect_secrets
from specsweep.pipeline import kill_stale_servers
from specsweep.targets.cleanup import CleanupReport
from specsweep.targets.gpus import simulated_gpus


def _config(flow_run: FlowRun) -> SweepConfig:
    return sweep_config(flow_run.parameters.get("config"))  # the file's shape or a form's


def kill_recorded_servers(flow: Flow, flow_run: FlowRun, state: State) -> None:
    """Stop the servers the run's target recorded (the `finally` may never have run)."""
    use_prefect_secrets()  # an SSH target's key may be a Secret block
    report = _kill_stale(_config(flow_run))
    flow_run_logger(flow_run, flow).warning(
        "flow run %s: %s; stopped server processes %s",
        flow_run.name, state.name, report.killed_pids or "none left",
    )  # fmt: skip


def stop_fleet_host_servers(flow: Any, flow_run: FlowRun, state: Any) -> None:
    """The same for a fleet variant: its host (the worker's) names the target."""
    use_prefect_secrets()
    host = current_host(Fleet.model_validate(flow_run.parameters["fleet"]))
    _kill_stale(config_for_host(_config(flow_run), host))


def _kill_stale(config: SweepConfig) -> CleanupReport:
    """kill_stale_servers; a local simulator target's GPUs through the simulator's
    nvidia-smi, as while it ran (flows/target_lock.py)."""
    with ExitStack() as stack:
        if config.server.backend == "simulator" and config.target.kind == "local":
            stack.enter_context(simulated_gpus(config.server.env))
        return kill_stale_servers(config)


# A worker or `serve` runs these for the flow run it deployed, the sweep, not for its
# benchmark-variant subflows: when it cancels (SIGTERM, then SIGKILL) the sweep's
# process, neither the subflow's `finally` nor its own hooks may get to run.
STOP_SERVERS_HOOKS = {
    "on_cancellation": [kill_recorded_servers],
    "on_crashed": [kill_recorded_servers],
}
FLEET_HOST_HOOKS = {
    "on_cancellation": [stop_fleet_host_servers],
    "on_crashed": [stop_fleet_host_servers],
}
