"""The catalogue of deployments and the two ways to apply it: serve or deploy.

Deployments are data: each entry names a flow, a description, tags, the function
that names its runs and whether it runs on the nightly schedule. `serve_all` runs
them from this process (one machine, no work pool); `deploy_all` registers them
with a Prefect server so a process work pool's workers (`specsweep worker`,
deployments/worker.py) run them. Both are idempotent. The flows' pydantic
parameters become the Prefect UI's run form; a config file given here becomes
the form's defaults and the nightly run's parameters.

What the deployment page shows, since the UI shows no timezone and no global limit
of its own accord: the description says the schedule in its timezone and names the
target's global concurrency limit; the nightly schedule is labelled with the same
wording (the UI shows a schedule's slug in place of "At 02:00 AM every day"); and
each deployment has a concurrency limit of one run (further runs queue), so two runs
of one deployment never interleave their variants on the target.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_type_hints
from uuid import UUID

from prefect import Flow, deploy, serve
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.exceptions import ObjectNotFound
from prefect.schedules import Cron

from specsweep.config import SweepConfig
from specsweep.config.forms import SweepForm
from specsweep.config.schedule import NightlySchedule
from specsweep.deployments.run_labels import Labeller, RunNamer
from specsweep.flows.algorithm_sweep import algorithm_sweep, algorithm_sweep_run_name
from specsweep.flows.matrix_sweep import matrix_sweep, matrix_sweep_run_name
from specsweep.flows.nightly_regression import nightly_regression, nightly_run_name
from specsweep.flows.step_sweep import step_sweep, step_sweep_run_name
from specsweep.flows.target_lock import (
    LOCK_PREFIX,
    TARGET_SLOTS,
    ensure_target_limit,
    target_lock_name,
)
from specsweep.flows.topk_sweep import topk_sweep, topk_sweep_run_name

DEFAULT_POOL = "specsweep"

# One run per deployment at a time, like one server per target: a second run queues
# (AwaitingConcurrencySlot) instead of interleaving its variants on the target lock.
RUN_LIMIT = ConcurrencyLimitConfig(
    limit=TARGET_SLOTS, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE
)


@dataclass(frozen=True)
class DeploymentEntry:
    name: str
    flow: Flow
    description: str
    run_name: RunNamer  # the flow's own flow_run_name calls it too
    tags: tuple[str, ...] = field(default_factory=tuple)
    nightly: bool = False  # runs on the nightly cron schedule


CATALOGUE: tuple[DeploymentEntry, ...] = (
    DeploymentEntry(
        name="step-sweep",
        flow=step_sweep,
        description="Baseline plus one speculative variant per num_steps, every level.",
        run_name=step_sweep_run_name,
        tags=("specsweep", "step-sweep"),
    ),
    DeploymentEntry(
        name="topk-sweep",
        flow=topk_sweep,
        description="Baseline plus one speculative variant per topk at fixed num_steps.",
        run_name=topk_sweep_run_name,
        tags=("specsweep", "topk-sweep"),
    ),
    DeploymentEntry(
        name="algorithm-sweep",
        flow=algorithm_sweep,
        description="Baseline plus, per enabled speculative algorithm, its settings.",
        run_name=algorithm_sweep_run_name,
        tags=("specsweep", "algorithm-sweep"),
    ),
    DeploymentEntry(
        name="matrix-sweep",
        flow=matrix_sweep,
        description="Every sweep section of the config plus its explicit variants.",
        run_name=matrix_sweep_run_name,
        tags=("specsweep", "matrix-sweep"),
    ),
    DeploymentEntry(
        name="nightly-regression",
        flow=nightly_regression,
        description="The config's sweep every night, judged against its own history.",
        run_name=nightly_run_name,
        tags=("specsweep", "nightly"),
        nightly=True,
    ),
)


def describe(entry: DeploymentEntry, config: SweepConfig | None, schedule: NightlySchedule) -> str:
    """The entry's description, plus its schedule in its timezone and the limits it runs
    under, by name: what the deployment page shows nowhere else."""
    limit = target_lock_name(config) if config is not None else f"{LOCK_PREFIX}<target name>"
    when = f" {schedule.describe()}." if entry.nightly else ""
    return (
        f"{entry.description}{when} One run of this deployment at a time (concurrency limit "
        f"{RUN_LIMIT.limit}, further runs queue); each variant's server holds the target's "
        f"global concurrency limit `{limit}`."
    )


def form_of(flow: Flow) -> type[SweepForm]:
    """The run form of a flow: the type of its `config` parameter."""
    return get_type_hints(flow.fn)["config"]


def run_id_first(deployment: RunnerDeployment) -> RunnerDeployment:
    """The UI shows parameters by their schema's position: run_id first (what a custom run
    sets most often, and the form's config is long), then the flow's own order. The flows
    keep `config` first so that `step_sweep(config)` still binds it."""
    properties = deployment._parameter_openapi_schema.properties  # no public setter
    order = sorted(properties, key=lambda k: (k != "run_id", properties[k].get("position", 0)))
    for position, name in enumerate(order):
        properties[name]["position"] = position
    return deployment


def runner_deployments(
    config: SweepConfig | None = None,
    schedule: NightlySchedule | None = None,
    *,
    job_variables: dict[str, object] | None = None,
) -> list[RunnerDeployment]:
    """One deployment per entry; `config` fills the UI form and the nightly runs.

    Without a config the nightly schedule is registered paused: a scheduled run
    would have no configuration to run. Each form holds only what its flow reads
    (specsweep/config/forms.py). The API does not check parameters against the form's
    schema: `prefect deployment run --param config=...` may give the config file's shape
    too, and the flow validates either with SweepConfig's rules when the run starts.
    """
    schedule = schedule or NightlySchedule()

    def parameters(entry: DeploymentEntry) -> dict[str, object]:
        return {"config": form_of(entry.flow).values_of(config)} if config is not None else {}

    return [
        run_id_first(
            e.flow.to_deployment(
                name=e.name,
                description=describe(e, config, schedule),
                tags=list(e.tags),
                parameters=parameters(e),
                schedules=(
                    [
                        Cron(
                            schedule.cron,
                            timezone=schedule.timezone,
                            active=config is not None,
                            slug=schedule.describe(),  # the UI's label for the schedule
                        )
                    ]
                    if e.nightly
                    else None
                ),
                concurrency_limit=RUN_LIMIT,
                # Runs import specsweep.flows.<module> from the installed package: no code
                # storage, and a worker or `serve` may start in any directory (even one that
                # holds a `flows` package of its own).
                entrypoint_type=EntrypointType.MODULE_PATH,
                job_variables=job_variables,
                enforce_parameter_schema=False,
            )
        )
        for e in CATALOGUE
    ]


def drop_replaced_schedules(schedule: NightlySchedule) -> list[str]:
    """Delete the nightly deployment's schedules that carry another label than this one's.

    Prefect updates a labelled (slugged) schedule in place and keeps the labelled ones a
    redeploy does not mention: after `--cron` or `--timezone` changed, the old label
    would go on scheduling beside the new one.
    """
    dropped = []
    with get_client(sync_client=True) as client:
        for entry in CATALOGUE:
            if not entry.nightly:
                continue
            try:
                deployment = client.read_deployment_by_name(f"{entry.flow.name}/{entry.name}")
            except ObjectNotFound:
                continue
            for old in deployment.schedules:
                if old.slug is not None and old.slug != schedule.describe():
                    client.delete_deployment_schedule(deployment.id, old.id)
                    dropped.append(old.slug)
    return dropped


def ensure_process_pool(name: str) -> bool:
    """Create a process work pool unless it exists; True when it was created."""
    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
            return False
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
            return True


def deploy_all(
    config: SweepConfig,
    pool: str = DEFAULT_POOL,
    schedule: NightlySchedule | None = None,
    working_dir: Path | None = None,
) -> list[UUID]:
    """Register every deployment for `pool`'s workers, creating the pool and target limit.

    Workers start flow runs in `working_dir` (default: here), so relative paths in
    the config (results_dir, target.workdir) mean what they mean for `specsweep run`.
    """
    ensure_process_pool(pool)
    ensure_target_limit(target_lock_name(config))
    drop_replaced_schedules(schedule or NightlySchedule())
    deployments = runner_deployments(
        config,
        schedule,
        job_variables={"working_dir": str((working_dir or Path.cwd()).resolve())},
    )
    return deploy(
        *deployments,
        work_pool_name=pool,
        build=False,
        push=False,
        print_next_steps_message=False,
        ignore_warnings=True,
    )


def serve_all(config: SweepConfig | None = None, schedule: NightlySchedule | None = None) -> None:
    """Serve every deployment from this process until interrupted (one machine, no pool);
    a thread names and tags their runs as they are created, as `specsweep worker` does."""
    if config is not None:
        ensure_target_limit(target_lock_name(config))
    drop_replaced_schedules(schedule or NightlySchedule())
    stop = threading.Event()
    labels = threading.Thread(
        target=Labeller(CATALOGUE, pool=None).run_until, args=(stop,), daemon=True
    )
    labels.start()
    try:
        serve(*runner_deployments(config, schedule))
    finally:
        stop.set()


def main() -> None:
    serve_all()


if __name__ == "__main__":
    main()
