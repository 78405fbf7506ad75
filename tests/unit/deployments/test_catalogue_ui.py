"""What the deployment page shows, built without a server: the schedule in its timezone,
the limits by name, one run at a time; and the label a new run gets from it."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

from prefect.client.schemas.objects import (
    ConcurrencyLimitStrategy,
    CreatedBy,
    DeploymentSchedule,
    FlowRun,
)
from prefect.client.schemas.responses import DeploymentResponse
from prefect.client.schemas.schedules import CronSchedule
from prefect.deployments.runner import RunnerDeployment

from specsweep.config.schedule import NightlySchedule
from specsweep.deployments.catalogue import CATALOGUE, runner_deployments
from specsweep.deployments.run_labels import wanted_label
from specsweep.flows.algorithm_sweep import _run_name as algorithm_run_name
from specsweep.flows.algorithm_sweep import algorithm_sweep_run_name
from specsweep.flows.matrix_sweep import _run_name as matrix_run_name
from specsweep.flows.matrix_sweep import matrix_sweep_run_name
from specsweep.flows.nightly_regression import _run_name as nightly_run_name_at_start
from specsweep.flows.nightly_regression import nightly_run_name
from specsweep.flows.step_sweep import _run_name as step_run_name
from specsweep.flows.step_sweep import step_sweep_run_name
from specsweep.flows.topk_sweep import _run_name as topk_run_name
from specsweep.flows.topk_sweep import topk_sweep_run_name


def by_name(deployments: list[RunnerDeployment]) -> dict[str, RunnerDeployment]:
    return {d.name: d for d in deployments}


def test_every_deployment_runs_one_at_a_time_and_queues_the_rest(sim_config):
    for d in runner_deployments(sim_config):
        assert d.concurrency_limit == 1
        assert d.concurrency_options is not None
        assert d.concurrency_options.collision_strategy == ConcurrencyLimitStrategy.ENQUEUE


def test_descriptions_name_the_targets_limit_and_the_nightly_time(sim_config):
    deployments = by_name(
        runner_deployments(sim_config, NightlySchedule("0 2 * * *", "Asia/Tokyo"))
    )
    step = deployments["step-sweep"].description
    assert step == (
        "Baseline plus one speculative variant per num_steps, every level. One run of this "
        "deployment at a time (concurrency limit 1, further runs queue); each variant's server "
        "holds the target's global concurrency limit `specsweep-target-test-host`."
    )
    nightly = deployments["nightly-regression"].description
    assert "every night, judged against its own history. Nightly at 02:00 Asia/Tokyo " in nightly
    assert "(cron 0 2 * * *). One run of this deployment at a time" in nightly
    assert "`specsweep-target-test-host`" in nightly
    # without a config, the limit is named by its pattern
    bare = by_name(runner_deployments())["step-sweep"].description
    assert "`specsweep-target-<target name>`" in bare


def test_the_nightly_schedule_is_labelled_with_its_time_and_zone(sim_config):
    [entry] = by_name(runner_deployments(sim_config))["nightly-regression"].schedules
    assert entry.slug == "Nightly at 02:00 Europe/Berlin (cron 0 2 * * *)"  # what the UI shows
    assert (entry.schedule.cron, entry.schedule.timezone) == ("0 2 * * *", "Europe/Berlin")
    assert entry.active


def test_each_entry_names_runs_as_its_flow_does():
    """The labeller and the flow's flow_run_name use one function per flow."""
    namers = {e.name: (e.run_name, e.flow.flow_run_name) for e in CATALOGUE}
    assert namers == {
        "step-sweep": (step_sweep_run_name, step_run_name),
        "topk-sweep": (topk_sweep_run_name, topk_run_name),
        "algorithm-sweep": (algorithm_sweep_run_name, algorithm_run_name),
        "matrix-sweep": (matrix_sweep_run_name, matrix_run_name),
        "nightly-regression": (nightly_run_name, nightly_run_name_at_start),
    }


def deployment_response(schedules: list[DeploymentSchedule]) -> DeploymentResponse:
    return DeploymentResponse(
        id=uuid4(), name="nightly-regression", flow_id=uuid4(), schedules=schedules
    )


def test_a_scheduled_nightly_run_is_labelled_with_its_night(sim_config):
    nightly = next(e for e in CATALOGUE if e.nightly)
    schedule = DeploymentSchedule(
        id=uuid4(), schedule=CronSchedule(cron="0 2 * * *", timezone="Europe/Berlin")
    )
    run = FlowRun(
        id=uuid4(),
        name="zeta2-enya-p",
        flow_id=uuid4(),
        parameters={"config": sim_config.model_dump(mode="json")},
        tags=["auto-scheduled", "nightly", "specsweep"],
        expected_start_time=datetime(2026, 12, 3, 1, 0, tzinfo=UTC),
        created_by=CreatedBy(id=schedule.id, type="SCHEDULE", display_value="nightly"),
    )
    name, tags = wanted_label(nightly, deployment_response([schedule]), run)
    assert name == "nightly-regression/test-host/2026-12-03 02:00 Europe/Berlin"
    assert tags == ["auto-scheduled", "nightly", "specsweep", "target:test-host"]


def test_a_run_from_the_form_is_labelled_with_its_levels_and_run_id(sim_config):
    step = next(e for e in CATALOGUE if e.name == "step-sweep")
    config = sim_config.model_dump(mode="json")
    config["load"]["concurrency"] = [2, 8]
    run = FlowRun(
        id=uuid4(),
        name="zeta2-enya-p",
        flow_id=uuid4(),
        parameters={"config": config, "run_id": "ui-run"},
        tags=["specsweep", "step-sweep"],
        expected_start_time=datetime(2026, 12, 3, 13, 0, tzinfo=UTC),
    )
    name, tags = wanted_label(step, deployment_response([]), run)
    assert name == "step-sweep/test-host/steps=2/c=2,8"
    assert tags == ["run:ui-run", "specsweep", "step-sweep", "target:test-host"]
