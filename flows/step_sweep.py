"""Step-count sweep: the baseline plus one speculative variant per num_steps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from flows.benchmark_variant import benchmark_variant
from specsweep.config import SweepConfig
from specsweep.errors import ConfigError, SpecsweepError
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


def _run_name() -> str:
    config = flow_run.parameters.get("config")
    if not isinstance(config, SweepConfig):
        config = SweepConfig.model_validate(config)
    steps = ",".join(map(str, config.step_sweep.num_steps)) if config.step_sweep else "?"
    return f"step-sweep/{config.target.name}/steps={steps}"


@flow(name="step-sweep", flow_run_name=_run_name)
def step_sweep(
    config: SweepConfig, run_id: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Run the sweep, write Parquet results, and publish the summary as an artifact."""
    logger = get_run_logger()
    if config.step_sweep is None:
        raise ConfigError("step_sweep needs a step_sweep section in the configuration")
    variants = sweep_variants(config)  # every rule checked before any launch
    run_id = run_id or new_run_id()
    ctx = RunContext(run_id, "step_sweep", config.name, config.target.name)
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
    create_markdown_artifact(markdown, key="step-sweep-summary", description=f"run {run_id}")
    logger.info("\n%s", markdown)
    if failed:
        raise SweepFailed(run_id, failed)
    return {"run_id": run_id, "results_dir": str(config.results_dir), "failed": failed}
