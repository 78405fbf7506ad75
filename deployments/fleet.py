"""What a fleet needs on the Prefect server, and the worker each host runs.

`deploy_fleet` (idempotent) registers `fleet-variant` in the fleet's process
pool (the hosts' workers run it) and `fleet-sweep` in the orchestrator pool
(never on a host: it would hold the host's only slot while waiting for the
variants), creates each host's global concurrency limit, and the zombie
automation from Prefect's docs: a flow run whose heartbeats stop for
`lost_after_s` is marked Crashed, which is how a sweep learns its host is gone. Each host
also gets its own work queue in the fleet pool (the sweep pins its baselines there; the
host's worker creates it too, for a host added after the deploy).

Each host's worker is `deployments/fleet_worker.py`.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from pathlib import Path
from uuid import UUID

from prefect import deploy
from prefect.automations import Automation
from prefect.client.schemas.objects import StateType
from prefect.deployments.runner import EntrypointType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification
from prefect.exceptions import ObjectAlreadyExists

from specsweep.config import SweepConfig
from specsweep.config.fleet import Fleet, check_sweep_pool, config_for_host
from specsweep.deployments.catalogue import DEFAULT_POOL, ensure_process_pool
from specsweep.deployments.fleet_worker import ensure_host_queue
from specsweep.flows.fleet_sweep import fleet_sweep
from specsweep.flows.fleet_variant import HOST_TAG, fleet_variant
from specsweep.flows.target_lock import ensure_target_limit, target_lock_name

ZOMBIE_AUTOMATION = "specsweep: crash flow runs whose heartbeats stopped"


def zombie_automation(lost_after_s: int) -> Automation:
    """Prefect's documented recipe (docs: "Detect zombie flows")."""
    return Automation(
        name=ZOMBIE_AUTOMATION,
        description="A flow run whose host died stops heartbeating; mark it Crashed so a "
        "fleet sweep re-runs its variant on another host.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
            },
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            # Only runs on fleet hosts (their heartbeat is fleet.heartbeat_s): any other
            # flow run on this server heartbeats every 180 s by default.
            match_related=ResourceSpecification(
                {"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{HOST_TAG}"}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=lost_after_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {lost_after_s} s: its host is lost",
            )
        ],
    )


def ensure_zombie_automation(lost_after_s: int) -> str:
    """Create the automation, or bring an existing one to this `lost_after_s`."""
    wanted = zombie_automation(lost_after_s)
    try:
        existing = Automation.read(name=ZOMBIE_AUTOMATION)
    except ValueError:  # Automation.read raises ValueError when no automation has the name
        wanted.create()
        return "created"
    if existing.trigger == wanted.trigger and existing.actions == wanted.actions:
        return "exists"
    existing.trigger = wanted.trigger
    existing.actions = wanted.actions
    existing.update()
    return "updated"


def deploy_fleet(
    config: SweepConfig,
    fleet: Fleet,
    sweep_pool: str = DEFAULT_POOL,
    working_dir: Path | None = None,
) -> list[UUID]:
    """Register the fleet's deployments, pools, host queues and limits, zombie automation."""
    check_sweep_pool(fleet, sweep_pool)
    for pool in (fleet.pool, sweep_pool):
        with contextlib.suppress(ObjectAlreadyExists):  # a host's worker created it meanwhile
            ensure_process_pool(pool)
    for host in fleet.hosts:
        ensure_host_queue(fleet.pool, host.name)
        ensure_target_limit(target_lock_name(config_for_host(config, host)))
    ensure_zombie_automation(fleet.lost_after_s)
    parameters = {"config": config.model_dump(mode="json"), "fleet": fleet.model_dump(mode="json")}
    job_variables = {"working_dir": str((working_dir or Path.cwd()).resolve())}

    def deployment(flow, description: str):
        return flow.to_deployment(
            name=flow.name,
            description=description,
            tags=["specsweep", "fleet", *([HOST_TAG] if flow is fleet_variant else [])],
            parameters=parameters if flow is fleet_sweep else {},
            entrypoint_type=EntrypointType.MODULE_PATH,
            job_variables=job_variables,
        )

    ids = deploy(
        deployment(fleet_variant, "One variant on the fleet host whose worker takes it."),
        work_pool_name=fleet.pool,
        build=False,
        push=False,
        print_next_steps_message=False,
        ignore_warnings=True,
    )
    ids += deploy(
        deployment(fleet_sweep, "Every variant of the config, each on a free fleet host."),
        work_pool_name=sweep_pool,
        build=False,
        push=False,
        print_next_steps_message=False,
        ignore_warnings=True,
    )
    return ids
