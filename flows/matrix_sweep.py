"""The one sweep implementation: every variant of a config, then the summary.

The step and topk sweeps are presets of this flow (they pick which section of
the config to expand); all three share `run_sweep`, so resume, failure
reporting and the summary artifact behave identically.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from flows.benchmark_variant import benchmark_variant, kill_recorded_servers
from specsweep.config import SweepConfig, Variant
from specsweep.errors import SpecsweepError
from specsweep.plan import sweep_variants
from specsweep.preflight import check_results_dir
from specsweep.report_md import summary_markdown
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore, new_run_id
from specsweep.runs import run_row
from specsweep.secrets import literal_secret_names
from specsweep.summary import summarize
from tasks.answer import publish_answer


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


class SweepFailed(SpecsweepError):
    """Some variants failed; their levels are missing from the results."""

    def __init__(self, run_id: str, failed: list[str]) -> None:
        super().__init__(run_id, failed)  # args stay (run_id, failed): picklable, copyable
        self.run_id = run_id
        self.failed = failed

    def __str__(self) -> str:
        return (
            f"run {self.run_id}: variants failed: {', '.join(self.failed)} "
            "(their measured levels are kept)"
        )


# A worker or `serve` runs these for the flow run it deployed, the sweep, not for its
# benchmark-variant subflows: when it cancels (SIGTERM, then SIGKILL) the sweep's
# process, neither the subflow's `finally` nor its own hooks may get to run.
STOP_SERVERS_HOOKS = {
    "on_cancellation": [kill_recorded_servers],
    "on_crashed": [kill_recorded_servers],
}


def run_config() -> SweepConfig:
    """The running flow's config parameter, validated (the API hands over plain dicts)."""
    config = flow_run.parameters.get("config")
    return config if isinstance(config, SweepConfig) else SweepConfig.model_validate(config)


def begin_run(
    config: SweepConfig, variants: list[Variant], kind: str, run_id: str | None, target: str
) -> tuple[RunContext, datetime]:
    """Check the results dir, write the `running` runs row (a resumed run keeps its first
    start time) and warn about plain secrets: before any launch."""
    logger = get_run_logger()
    check_results_dir(config, len(variants))  # before any launch: full disk, read-only dir
    run_id = run_id or new_run_id()
    ctx = RunContext(run_id, kind.replace("-", "_"), config.name, target)
    store = ResultsStore(config.results_dir)
    previous = store.read_run(run_id)
    started = previous["started_at"] if previous else datetime.now(UTC)
    store.write_run(run_row(config, ctx, variants, {}, started, status="running"))
    logger.info(
        "run %s: %d variants x %d levels -> %s%s",
        run_id,
        len(variants),
        len(config.load.concurrency),
        config.results_dir,
        " (resumed: measured levels are skipped)" if previous else "",
    )
    if literal := literal_secret_names([config.server.env, *(v.env for v in variants)]):
        logger.warning(
            "%s: plain values in env are kept in this flow run's stored parameters; "
            "write them as secret:<Prefect Secret block name> instead",
            ", ".join(literal),
        )
    return ctx, started


def finish_run(
    config: SweepConfig,
    ctx: RunContext,
    variants: list[Variant],
    errors: dict[str, str],
    started: datetime,
    kind: str,
    publish: bool,
    skipped: list[str] | None = None,
) -> dict[str, Any]:
    """Write the final runs row, the summary artifact and the answer; raise SweepFailed
    naming the failed variants (their measured levels are kept)."""
    logger = get_run_logger()
    store = ResultsStore(config.results_dir)
    run_id = ctx.run_id
    row = run_row(
        config, ctx, variants, errors, started, phases=store.read_phases(run_id), skipped=skipped
    )
    store.write_run(row)
    levels = store.read_levels(run_id)
    summary = summarize(levels)
    markdown = summary_markdown(run_id, summary, errors)
    create_markdown_artifact(markdown, key=f"{kind}-summary", description=f"run {run_id}")
    logger.info("\n%s", markdown)
    result: dict[str, Any] = {"run_id": run_id, "results_dir": str(config.results_dir)}
    if publish and not levels.empty:
        answer = publish_answer(config.results_dir, run_id, return_state=True)
        if answer.is_completed():
            result["answer"] = answer.result()
        else:  # the measurements are safe; only the report failed
            logger.warning("could not publish the answer for run %s: %s", run_id, answer.message)
    if errors:  # skipped variants only follow a failed one
        raise SweepFailed(run_id, list(errors))
    return result | {"failed": []}


def run_sweep(
    config: SweepConfig,
    variants: list[Variant],
    kind: str,
    run_id: str | None = None,
    force: bool = False,
    publish: bool = True,
) -> dict[str, Any]:
    """Benchmark each variant in its own subflow; a failed variant is recorded and the
    sweep goes on (unless config.stop_on_failure), and nothing measured is ever lost."""
    logger = get_run_logger()
    ctx, started = begin_run(config, variants, kind, run_id, config.target.name)
    errors: dict[str, str] = {}
    skipped: list[str] = []
    for variant in variants:
        if errors and config.stop_on_failure:
            skipped.append(variant.label)
            continue
        state = benchmark_variant(config, variant, ctx, force=force, return_state=True)
        if state.is_failed() or state.is_crashed():
            exc = state.result(raise_on_failure=False)
            errors[variant.label] = first_line(exc) if exc is not None else str(state.message)
            logger.error("variant %s failed: %s", variant.label, errors[variant.label])
    if skipped:
        logger.warning("stop_on_failure: skipped %s", ", ".join(skipped))
    return finish_run(config, ctx, variants, errors, started, kind, publish, skipped)


def _run_name() -> str:
    config = run_config()
    try:
        labels = [v.label for v in sweep_variants(config)]
    except SpecsweepError:
        labels = ["invalid"]
    shown = ",".join(labels[:4]) + (f",+{len(labels) - 4}" if len(labels) > 4 else "")
    return f"matrix-sweep/{config.target.name}/{shown}"


@flow(name="matrix-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def matrix_sweep(
    config: SweepConfig, run_id: str | None = None, force: bool = False, publish: bool = True
) -> dict[str, Any]:
    """Run every variant the config describes (its sweep sections and explicit variants).

    Args:
        config: Target, server, load and the variants to compare; the baseline always runs.
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
        publish: Render the report and publish the answer (policy, pivots) as artifacts.
    """
    variants = sweep_variants(config)  # every rule checked before any launch
    return run_sweep(config, variants, "matrix-sweep", run_id, force, publish)
