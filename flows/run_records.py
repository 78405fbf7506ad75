"""A run's bookkeeping, shared by every sweep flow (matrix, step, topk, fleet) and the CLI:
the `running` runs row before any launch, the final row, the summary artifact and the
answer after the last variant, and the one-line form of a variant's error."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from specsweep.analysis.summary import summarize
from specsweep.config import SweepConfig, Variant
from specsweep.config.secrets import literal_secret_names
from specsweep.config.versions import SglangVersion
from specsweep.errors import SweepFailed
from specsweep.report.artifacts import fit_tables
from specsweep.report.markdown import summary_markdown, summary_text
from specsweep.report.prose import fit_text
from specsweep.results.phases import gpu_memory_lines
from specsweep.results.preflight import check_results_dir
from specsweep.results.rows import RunContext
from specsweep.results.runs import run_row
from specsweep.results.store import ResultsStore, new_run_id
from specsweep.tasks.answer import publish_answer
from specsweep.workloads.preflight import check_load


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def run_config() -> SweepConfig:
    """The running flow's config parameter, validated (the API hands over plain dicts)."""
    config = flow_run.parameters.get("config")
    return config if isinstance(config, SweepConfig) else SweepConfig.model_validate(config)


def begin_run(
    config: SweepConfig,
    variants: list[Variant],
    kind: str,
    run_id: str | None,
    target: str,
    sglang: SglangVersion | None = None,
) -> tuple[RunContext, datetime]:
    """Check the results dir, write the `running` runs row (a resumed run keeps its first
    start time) and warn about plain secrets: before any launch."""
    logger = get_run_logger()
    check_results_dir(config, len(variants))  # before any launch: full disk, read-only dir
    for note in check_load(config, variants):
        logger.warning("%s", note)
    run_id = run_id or new_run_id()
    ctx = RunContext(run_id, kind.replace("-", "_"), config.name, target)
    store = ResultsStore(config.results_dir)
    previous = store.read_run(run_id)
    started = previous["started_at"] if previous else datetime.now(UTC)
    store.write_run(run_row(config, ctx, variants, {}, started, status="running", sglang=sglang))
    shapes = len(config.load.shape_list())
    logger.info(
        "run %s: %d variants x %d levels%s -> %s%s",
        run_id,
        len(variants),
        len(config.load.concurrency),
        f" x {shapes} shapes" if shapes > 1 else "",
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
    search_stop: str | None = None,
    sglang: SglangVersion | None = None,
) -> dict[str, Any]:
    """Write the final runs row, the summary artifact and the answer; raise SweepFailed
    naming the failed variants (their measured levels are kept)."""
    logger = get_run_logger()
    store = ResultsStore(config.results_dir)
    run_id = ctx.run_id
    row = run_row(
        config,
        ctx,
        variants,
        errors,
        started,
        phases=store.read_phases(run_id),
        skipped=skipped,
        search_stop=search_stop,
        sglang=sglang,
    )
    store.write_run(row)
    levels = store.read_levels(run_id)
    summary = summarize(
        levels,
        store.read_predictions(run_id),
        search_stop,
        store.read_host_plans(run_id),
        json.loads(row["phases"]),
    )
    memory = gpu_memory_lines(store.read_phase_files(run_id))
    markdown = summary_markdown(run_id, summary, errors, memory)
    create_markdown_artifact(
        fit_tables(fit_text(markdown)), key=f"{kind}-summary", description=f"run {run_id}"
    )  # tables fitted to the UI's artifact column, as the answer's
    logger.info("\n%s", summary_text(run_id, summary, errors, memory))  # a log shows no Markdown
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
