"""Judge a stored run against its history, publish the verdict, announce regressions as events;
the same for the run's decisions (best per level, pivots, policy) against the last nights'."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.events import Event, emit_event

from specsweep.analysis.decisions import DecisionReport, judge_stored_decisions
from specsweep.analysis.params import RegressionPolicy
from specsweep.analysis.regression import RegressionReport, judge_stored_run, verdict_markdown
from specsweep.report.prose import fit_text
from specsweep.results.store import ResultsStore

REGRESSION_EVENT = "specsweep.regression.detected"
VERDICT_KEY = "specsweep-regression-verdict"
DECISION_EVENT = "specsweep.decision.changed"
DECISIONS_KEY = "specsweep-decisions"


@task(name="judge-regression", cache_policy=NO_CACHE)
def judge_regression(
    results_dir: Path | str, run_id: str, policy: RegressionPolicy | None = None
) -> RegressionReport:
    """Every judged number of the run against the runs before it; the verdict as an artifact."""
    logger = get_run_logger()
    report = judge_stored_run(ResultsStore(results_dir), run_id, policy)
    create_markdown_artifact(
        fit_text(verdict_markdown(report)), key=VERDICT_KEY, description=report.headline()
    )
    (logger.error if report.regressed else logger.info)("%s", report.message())
    return report


@task(name="emit-regression-event", cache_policy=NO_CACHE)
def emit_regression_event(report: RegressionReport) -> Event | None:
    """`specsweep.regression.detected` on the run's resource, for automations to notify on.

    Emitted inside the flow run (from this task run), so Prefect relates it to the flow
    run and its deployment, and an automation can link back to it.
    """
    targets = sorted({str(t) for t in report.regressions["target"]})
    return emit_event(
        event=REGRESSION_EVENT,
        resource={
            "prefect.resource.id": f"specsweep.run.{report.run_id}",
            "prefect.resource.name": report.run_id,
            "specsweep.target": ",".join(targets),
        },
        payload=report.event_payload(),
    )


@task(name="judge-decisions", cache_policy=NO_CACHE)
def judge_decisions(
    results_dir: Path | str, run_id: str, policy: RegressionPolicy | None = None
) -> DecisionReport:
    """The run's best variant per level, pivots and policy against the last nights' (the
    `specsweep-decisions` artifact); when one moved beyond its interval, emits
    `specsweep.decision.changed` on the run's resource, with every number behind it."""
    logger = get_run_logger()
    report = judge_stored_decisions(ResultsStore(results_dir), run_id, policy)
    create_markdown_artifact(
        fit_text(report.markdown()), key=DECISIONS_KEY, description=report.headline()
    )
    (logger.warning if report.moved else logger.info)("%s", report.message())
    if report.moved:
        targets = sorted({str(d.scope["target"]) for d in report.changed})
        emit_event(
            event=DECISION_EVENT,
            resource={
                "prefect.resource.id": f"specsweep.run.{report.run_id}",
                "prefect.resource.name": report.run_id,
                "specsweep.target": ",".join(targets),
            },
            payload=report.event_payload(),
        )
    return report
