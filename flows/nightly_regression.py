"""Nightly regression: measure the configured matrix, then judge it against its own history.

Retries never re-measure what was measured: the run id is derived from the
flow run (its expected start time and id), so a retry of the same flow run
resumes the same run id, the sweep skips every level already on disk, and
the verdict is re-computed from the very numbers that failed it. A genuine
regression therefore fails every retry too; only levels that were never
measured (a variant that crashed) are attempted again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx
from prefect import flow, get_run_logger, tags
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import CreatedBy, DeploymentSchedule
from prefect.context import FlowRunContext
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run

from specsweep.analysis.params import RegressionPolicy
from specsweep.config.forms import MatrixSweepForm
from specsweep.config.schedule import local_time
from specsweep.errors import RegressionDetected, SweepFailed
from specsweep.flows.hooks import STOP_SERVERS_HOOKS
from specsweep.flows.matrix_sweep import matrix_sweep, named_config, raw_target
from specsweep.results.store import ResultsStore, new_run_id
from specsweep.tasks.answer import publish_answer
from specsweep.tasks.regression import emit_regression_event, judge_decisions, judge_regression


def nightly_run_id() -> str:
    """Same value on every retry of one flow run; time-sortable like new_run_id()."""
    run = flow_run.get_id()
    if run is None:  # called outside a flow run
        return new_run_id()
    start = flow_run.get_scheduled_start_time()
    return f"{start:%Y%m%dT%H%M%SZ}-{run.replace('-', '')[:6]}"


def schedule_timezone(
    schedules: Sequence[DeploymentSchedule], created_by: CreatedBy | None
) -> str | None:
    """The timezone of the schedule that created a run (its `created_by` names it), else of
    the deployment's first schedule that has one (a run from the form); None: UTC."""
    if created_by is not None and created_by.type == "SCHEDULE":
        for entry in schedules:
            if entry.id == created_by.id and getattr(entry.schedule, "timezone", None):
                return entry.schedule.timezone
    zones = [getattr(entry.schedule, "timezone", None) for entry in schedules]
    return next((zone for zone in zones if zone), None)


def nightly_run_name(
    parameters: Mapping[str, Any],
    scheduled: datetime | None = None,
    timezone: str | None = None,
) -> str:
    """'nightly-regression/<target>/2026-12-03 02:00 Europe/Berlin': the night it measures,
    as the schedule's clock reads it (the UI shows times in the browser's zone)."""
    config = named_config(parameters)
    target = config.target.name if config is not None else raw_target(parameters) or "?"
    when = local_time(scheduled, timezone) if scheduled is not None else "unscheduled"
    return f"nightly-regression/{target}/{when}"


def _deployment_timezone() -> str | None:
    """This run's schedule timezone, read from its deployment; None outside one."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or run.deployment_id is None:
        return None
    try:
        with get_client(sync_client=True) as client:
            deployment = client.read_deployment(run.deployment_id)
    except (ObjectNotFound, httpx.HTTPError):  # the name says UTC; the run goes on
        return None
    return schedule_timezone(deployment.schedules, run.created_by)


def _run_name() -> str:
    return nightly_run_name(
        flow_run.parameters, flow_run.get_scheduled_start_time(), _deployment_timezone()
    )


@flow(name="nightly-regression", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def nightly_regression(
    config: MatrixSweepForm,
    policy: RegressionPolicy = RegressionPolicy(),  # noqa: B008 - frozen, never mutated
    run_id: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Run the sweep, judge every (target, model, variant, level) against its history.

    Args:
        config: The sweep measured each night (target, server, load, variants): a
            SweepConfig, its file's mapping or the form's values.
        policy: When a change counts as a regression (noise threshold, minimum change).
        run_id: Measure into / re-judge this run id; empty derives one from the flow run,
            stable across its retries. An id whose levels are all stored is judged as is.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.

    A regression fails the flow run with a message naming the metrics, after
    emitting `specsweep.regression.detected`; an improvement is reported only. A decision
    (best variant per level, pivot, policy) that moved beyond its interval since the last
    nights is published (`specsweep-decisions`) and emitted as `specsweep.decision.changed`;
    it never fails the run.
    """
    logger = get_run_logger()
    sweep = config.sweep
    run_id = run_id or nightly_run_id()
    try:
        # published below, on this flow run, with the verdict beside it
        with tags(*(flow_run.get_tags() or [])):  # the sweep and its variants: the night's tags
            matrix_sweep(sweep, run_id=run_id, force=force, publish=False)
    except SweepFailed as exc:  # judged below: a variant that failed is a verdict of its own
        logger.warning("%s; judging what was measured", exc)
    report = judge_regression(sweep.results_dir, run_id, policy)
    result = {
        "run_id": run_id,
        "regressed": report.regressed,
        "verdict": report.headline(),
        "regressions": report.event_payload()["regressions"],
        "improvements": len(report.improvements),
    }
    try:  # what the numbers decide; its failure must not cost the regression verdict
        decisions = judge_decisions(sweep.results_dir, run_id, policy)
        result |= {
            "decisions": decisions.headline(),
            "decision_changes": [d.record() for d in decisions.changed],
        }
    except Exception as exc:  # logged; the verdict above stands
        logger.error("judging the decisions failed: %r; the regression verdict stands", exc)
    if not ResultsStore(sweep.results_dir).read_levels(run_id).empty:  # something was measured
        answer = publish_answer(sweep.results_dir, run_id)
        result |= {"policy": answer["policy"], "report_html": answer["report_html"]}
    if report.regressed:
        emit_regression_event(report)
        raise RegressionDetected(run_id, report.message())
    return result
