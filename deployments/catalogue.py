"""The catalogue of deployments and the two ways to apply it: serve or deploy.

Deployments are data: each entry names a flow, a description, tags and whether
it runs on the nightly schedule. `serve_all` runs them from this process (one
machine, no work pool); `deploy_all` registers them with a Prefect server so a
process work pool's workers run them. Both are idempotent. The flows' pydantic
parameters become the Prefect UI's run form; a config file given here becomes
the form's defaults and the nightly run's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from prefect import Flow, deploy, serve
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.exceptions import ObjectNotFound
from prefect.schedules import Cron

from flows.matrix_sweep import matrix_sweep
from flows.nightly_regression import nightly_regression
from flows.step_sweep import step_sweep
from flows.target_lock import ensure_target_limit, target_lock_name
from flows.topk_sweep import topk_sweep
from specsweep.config import SweepConfig
from specsweep.config.schedule import NightlySchedule

DEFAULT_POOL = "specsweep"


@dataclass(frozen=True)
class DeploymentEntry:
    name: str
    flow: Flow
    description: str
    tags: tuple[str, ...] = field(default_factory=tuple)
    nightly: bool = False  # runs on the nightly cron schedule


CATALOGUE: tuple[DeploymentEntry, ...] = (
    DeploymentEntry(
        name="step-sweep",
        flow=step_sweep,
        description="Baseline plus one speculative variant per num_steps, every level.",
        tags=("specsweep", "step-sweep"),
    ),
    DeploymentEntry(
        name="topk-sweep",
        flow=topk_sweep,
        description="Baseline plus one speculative variant per topk at fixed num_steps.",
        tags=("specsweep", "topk-sweep"),
    ),
    DeploymentEntry(
        name="matrix-sweep",
        flow=matrix_sweep,
        description="Every sweep section of the config plus its explicit variants.",
        tags=("specsweep", "matrix-sweep"),
    ),
    DeploymentEntry(
        name="nightly-regression",
        flow=nightly_regression,
        description="The config's sweep every night, judged against its own history.",
        tags=("specsweep", "nightly"),
        nightly=True,
    ),
)


def runner_deployments(
    config: SweepConfig | None = None,
    schedule: NightlySchedule | None = None,
    *,
    job_variables: dict[str, object] | None = None,
) -> list[RunnerDeployment]:
    """One deployment per entry; `config` fills the UI form and the nightly runs.

    Without a config the nightly schedule is registered paused: a scheduled run
    would have no configuration to run.
    """
    schedule = schedule or NightlySchedule()
    parameters = {"config": config.model_dump(mode="json")} if config is not None else {}
    return [
        e.flow.to_deployment(
            name=e.name,
            description=e.description,
            tags=list(e.tags),
            parameters=parameters,
            schedules=(
                [Cron(schedule.cron, timezone=schedule.timezone, active=config is not None)]
                if e.nightly
                else None
            ),
            # Runs import flows.<module> from the installed package: no code storage, and
            # a worker or `serve` may start in any directory.
            entrypoint_type=EntrypointType.MODULE_PATH,
            job_variables=job_variables,
        )
        for e in CATALOGUE
    ]


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
    """Serve every deployment from this process until interrupted (one machine, no pool)."""
    if config is not None:
        ensure_target_limit(target_lock_name(config))
    serve(*runner_deployments(config, schedule))


def main() -> None:
    serve_all()


if __name__ == "__main__":
    main()
