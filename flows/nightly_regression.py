"""Nightly regression: measure the configured matrix, then judge it against its own history.

Retries never re-measure what was measured: the run id is derived from the
flow run (its expected start time and id), so a retry of the same flow run
resumes the same run id, the sweep skips every level already on disk, and
the verdict is re-computed from the very numbers that failed it. A genuine
regression therefore fails every retry too; only levels that were never
measured (a variant that crashed) are attempted again.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from flows.hooks import STOP_SERVERS_HOOKS
from flows.matrix_sweep import matrix_sweep
from flows.run_records import run_config
from specsweep.analysis.params import RegressionPolicy
from specsweep.config import SweepConfig
from specsweep.errors import RegressionDetected, SweepFailed
from specsweep.results.store import ResultsStore, new_run_id
from tasks.answer import publish_answer
from tasks.regression import emit_regression_event, judge_decisions, judge_regression


def nightly_run_id() -> str:
    """Same value on every retry of one flow run; time-sortable like new_run_id()."""
    run = flow_run.get_id()
    if run is None:  # called outside a flow run
        return new_run_id()
    start = flow_run.get_scheduled_start_time()
    return f"{start:%Y%m%dT%H%M%SZ}-{run.replace('-', '')[:6]}"


def _run_name() -> str:
    return f"nightly-regression/{run_config().target.name}/{run_config().name}"


@flow(name="nightly-regression", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def nightly_regression(
    config: SweepConfig,
    policy: RegressionPolicy = RegressionPolicy(),  # noqa: B008 - frozen, never mutated
    run_id: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Run the sweep, judge every (target, model, variant, level) against its history.

    Args:
        config: The sweep measured each night (target, server, load, variants).
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
    run_id = run_id or nightly_run_id()
    try:
        # published below, on this flow run, with the verdict beside it
        matrix_sweep(config, run_id=run_id, force=force, publish=False)
    except SweepFailed as exc:  # judged below: a variant that failed is a verdict of its own
        logger.warning("%s; judging what was measured", exc)
    report = judge_regression(config.results_dir, run_id, policy)
    result = {
        "run_id": run_id,
        "regressed": report.regressed,
        "verdict": report.headline(),
        "regressions": report.event_payload()["regressions"],
        "improvements": len(report.improvements),
    }
    try:  # what the numbers decide; its failure must not cost the regression verdict
        decisions = judge_decisions(config.results_dir, run_id, policy)
        result |= {
            "decisions": decisions.headline(),
            "decision_changes": [d.record() for d in decisions.changed],
        }
    except Exception as exc:  # logged; the verdict above stands
        logger.error("judging the decisions failed: %r; the regression verdict stands", exc)
    if not ResultsStore(config.results_dir).read_levels(run_id).empty:  # something was measured
        answer = publish_answer(config.results_dir, run_id)
        result |= {"policy": answer["policy"], "report_html": answer["report_html"]}
    if report.regressed:
        emit_regression_event(report)
        raise RegressionDetected(run_id, report.message())
    return result
