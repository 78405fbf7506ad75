"""One sweep spread over a fleet of GPU hosts, placed by Prefect.

`fleet_sweep` submits every variant as its own `fleet-variant` flow run into the
fleet's work pool (`run_deployment`, all at once; with `search: adaptive`, one per host
at a time, as the search chooses, each time a host frees up). Each host runs a worker with
a limit of one flow run, so Prefect hands the next variant to whichever host is
free; the host's global concurrency limit is held for its server's whole life,
so no two servers ever share a host's GPUs. specsweep schedules nothing itself:
it only re-submits a variant whose host was lost (its run Crashed: the zombie
automation fires when heartbeats stop) or failed its pre-flight check, and the
re-submitted run goes to whichever worker polls next (a dead host polls no more).
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.objects import FlowRun, WorkerStatus
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelled, Cancelling

from flows.fleet_variant import FLEET_VARIANT, HOST_TAG, KIND
from flows.run_records import begin_run, finish_run
from specsweep.config import SweepConfig
from specsweep.config.fleet import Fleet, worker_name
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError
from tasks.search import plan_next_launch


def _host_of(run: FlowRun) -> str:
    return run.name.rpartition("@")[2] if "@" in run.name else "an unknown host"


def _lost_host(run: FlowRun) -> bool:
    """Crashed (no heartbeat, killed) or refused by its host: worth another host."""
    state = run.state
    if state is None:
        return False
    return state.is_crashed() or (state.is_failed() and "HostUnavailable" in (state.message or ""))


def _check_deployment() -> None:
    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(FLEET_VARIANT)
        except ObjectNotFound:
            raise ConfigError(
                f"deployment {FLEET_VARIANT} not found on the Prefect API at "
                f"{PREFECT_API_URL.value() or '(ephemeral: a fleet needs a Prefect server)'}: "
                "run `specsweep fleet deploy -c <sweep.yaml> --fleet <fleet.yaml>` once"
            ) from None


def _hosts_online(fleet: Fleet) -> list[str]:
    """The fleet's hosts with a worker online in its pool (workers are named by host)."""
    with get_client(sync_client=True) as client:
        try:
            workers = client.read_workers_for_work_pool(fleet.pool)
        except ObjectNotFound:
            return []
    online = {w.name for w in workers if w.status == WorkerStatus.ONLINE}
    return [h.name for h in fleet.hosts if worker_name(fleet.name, h.name) in online]


def _cancel_children(flow: Any, flow_run: FlowRun, state: Any) -> None:
    """Cancelling a fleet sweep cancels the variant runs it submitted."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run.id])
            )
        )
        for child in children:
            if child.state is None or child.state.is_final():
                continue
            # Not started: cancelled outright. Started: Cancelling, so its worker stops the
            # process and the run's own hook stops its server.
            new = Cancelled() if child.state.is_scheduled() else Cancelling()
            client.set_flow_run_state(child.id, new, force=True)


def _run_name() -> str:
    fleet = flow_run.parameters.get("fleet")
    fleet = fleet if isinstance(fleet, Fleet) else Fleet.model_validate(fleet)
    return f"fleet-sweep/{fleet.name}/{len(fleet.hosts)}-hosts"


@flow(
    name="fleet-sweep",
    flow_run_name=_run_name,
    on_cancellation=[_cancel_children],
    on_crashed=[_cancel_children],
)
def fleet_sweep(
    config: SweepConfig,
    fleet: Fleet,
    run_id: str | None = None,
    force: bool = False,
    publish: bool = True,
) -> dict[str, Any]:
    """Every variant of the config, each on a free host of the fleet, into one store.

    Args:
        config: What to measure (its target is replaced by each host's).
        fleet: Where: the hosts, their work pool, how lost hosts are handled.
        run_id: Resume this run: levels measured on a host are skipped there.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
        publish: Render the report and publish the answer as artifacts.
    """
    logger = get_run_logger()
    variants = sweep_variants(config)  # every rule checked before any launch
    if config.verify_policy is not None:
        # the export compares curves measured on one host; a fleet spreads them over several
        raise ConfigError(
            "verify_policy is not available on a fleet sweep (the export and its proof must "
            "be measured on one host): run the fleet sweep, then `specsweep policy verify "
            "RUN_ID -c FILE` against one host's target"
        )
    _check_deployment()
    ctx, started = begin_run(config, variants, KIND, run_id, fleet.name)
    by_label = {v.label: v for v in variants}
    attempts: dict[str, int] = {}
    pending: dict[UUID, str] = {}
    errors: dict[str, str] = {}

    def submit(label: str) -> None:
        attempts[label] = attempts.get(label, 0) + 1
        run = run_deployment(
            FLEET_VARIANT,
            parameters={
                "config": config,
                "fleet": fleet,
                "variant": by_label[label],
                "run_id": ctx.run_id,
                "force": force,
            },
            timeout=0,  # submitted, not awaited: the workers place it
            as_subflow=True,
            tags=["specsweep", HOST_TAG, f"run:{ctx.run_id}"],
        )
        pending[run.id] = label

    online = _hosts_online(fleet)
    if missing := [h.name for h in fleet.hosts if h.name not in online]:
        logger.warning(
            "no worker online for host(s) %s (down, failed their pre-flight check, or not "
            "started: `specsweep fleet worker --host NAME`); their share goes to %s",
            ", ".join(missing), ", ".join(online) or "whichever host starts a worker",
        )  # fmt: skip
    tried: set[str] = set()
    search_stop: str | None = None

    def fill() -> None:
        """search: adaptive: hand out what the planner chooses, one per host, as hosts free
        up (the planner sees the variants in flight and waits for them before it stops)."""
        nonlocal search_stop
        while len(pending) < (len(online) or len(fleet.hosts)):
            launch, why, done = plan_next_launch(
                config, variants, ctx.run_id, fleet.name, tried, set(pending.values())
            )
            if launch is None:
                search_stop = why if done else None
                return
            tried.add(launch.label)
            submit(launch.label)

    if config.search.adaptive:
        fill()
    else:
        for label in by_label:
            submit(label)
    logger.info(
        "submitted %d variants to pool %s (hosts online: %s)",
        len(pending), fleet.pool, ", ".join(online) or "none yet",
    )  # fmt: skip
    with get_client(sync_client=True) as client:
        while pending:
            time.sleep(fleet.poll_s)
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(pending)))
            )
            for run in runs:
                if run.state is None or not run.state.is_final():
                    continue
                label = pending.pop(run.id)
                message = (run.state.message or run.state.name).strip().splitlines()
                why = message[0] if message else run.state.name
                if run.state.is_completed():
                    logger.info("%s done on %s", label, _host_of(run))
                elif _lost_host(run) and attempts[label] < fleet.max_attempts:
                    logger.warning(
                        "%s lost with host %s (%s: %s); re-running it on another host "
                        "(attempt %d of %d)", label, _host_of(run), run.state.name, why,
                        attempts[label] + 1, fleet.max_attempts,
                    )  # fmt: skip
                    submit(label)
                else:
                    errors[label] = f"{run.state.name} on {_host_of(run)}: {why}"
                    logger.error("variant %s failed: %s", label, errors[label])
            if config.search.adaptive and not (errors and config.stop_on_failure):
                fill()
    return finish_run(
        config, ctx, variants, errors, started, KIND, publish, search_stop=search_stop
    )
