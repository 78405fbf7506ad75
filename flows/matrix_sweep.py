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
from specsweep.report_md import summary_markdown
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore, new_run_id
from specsweep.runs import run_row
from specsweep.summary import summarize


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


def run_sweep(
    config: SweepConfig,
    variants: list[Variant],
    kind: str,
    run_id: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Benchmark each variant in its own subflow; one failing variant never stops the rest."""
    logger = get_run_logger()
    run_id = run_id or new_run_id()
    ctx = RunContext(run_id, kind.replace("-", "_"), config.name, config.target.name)
    started = datetime.now(UTC)
    logger.info(
        "run %s: %d variants x %d levels -> %s",
        run_id,
        len(variants),
        len(config.load.concurrency),
        config.results_dir,
    )
    errors: dict[str, str] = {}
    for variant in variants:
        state = benchmark_variant(config, variant, ctx, force=force, return_state=True)
        if state.is_failed() or state.is_crashed():
            exc = state.result(raise_on_failure=False)
            errors[variant.label] = first_line(exc) if exc is not None else str(state.message)
            logger.error("variant %s failed: %s", variant.label, errors[variant.label])
    failed = list(errors)
    store = ResultsStore(config.results_dir)
    store.write_run(run_row(config, ctx, variants, errors, started))
    summary = summarize(store.read_levels(run_id))
    markdown = summary_markdown(run_id, summary, errors)
    create_markdown_artifact(markdown, key=f"{kind}-summary", description=f"run {run_id}")
    logger.info("\n%s", markdown)
    if failed:
        raise SweepFailed(run_id, failed)
    return {"run_id": run_id, "results_dir": str(config.results_dir), "failed": failed}


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
    config: SweepConfig, run_id: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Run every variant the config describes (its sweep sections and explicit variants).

    Args:
        config: Target, server, load and the variants to compare; the baseline always runs.
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
    """
    variants = sweep_variants(config)  # every rule checked before any launch
    return run_sweep(config, variants, "matrix-sweep", run_id, force)
