"""What every `specsweep` command shares: the consoles, errors as exit codes, loading a
config, opening a results store, and printing a run's outcome."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from specsweep.analysis.summary import Summary, summarize
from specsweep.cli.wrap import command_lines, sentence_lines
from specsweep.config import SweepConfig
from specsweep.config.file import load_config
from specsweep.config.plan import SweepKind, sweep_variants
from specsweep.errors import ConfigError
from specsweep.report.caveats import simulated_note
from specsweep.results.phases import gpu_memory_lines
from specsweep.workloads.preflight import check_load

if TYPE_CHECKING:
    import pandas as pd

    from specsweep.analysis.answer import RunAnswer
    from specsweep.report.shapes import Surface
    from specsweep.results.store import ResultsStore

# Logs and CI capture output without a terminal; rich would squeeze tables to 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config key: --set load.output_len=64 (repeatable)."),
]
# A string, not a Path: a URI root (s3://bucket/prefix) must reach the store unmangled.
ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Sweep YAML file.")]
RunIdOpt = Annotated[
    str | None,
    typer.Option(
        "--run-id",
        "--resume",
        help="Resume this run: every (variant, level) already written is skipped.",
    ),
]
ForceOpt = Annotated[
    bool, typer.Option(help="Also kill processes on the port that are not provably ours.")
]
ResultsOpt = Annotated[
    str, typer.Option("--results-dir", help="Results root: a path or a pyarrow URI (s3://...).")
]


def fail(message: object, code: int = 2) -> typer.Exit:
    """Print the error and return the exit to raise: 2 bad input (nothing ran), 1 a failure."""
    err.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    return typer.Exit(code)


def load_sweep(
    path: Path | None, overrides: list[str] | None = None, kind: SweepKind = "matrix-sweep"
) -> SweepConfig:
    """The config with every rule of its sweep checked, before anything starts."""
    try:
        config = load_config(path, overrides or [])
        check_load(config, sweep_variants(config, kind))
    except ConfigError as exc:
        raise fail(exc) from None
    return config


# Prefect waits 20 s (its sleeps only) for a temporary API server's /health; its startup
# imports the whole server, which a busy 2-core host can stretch past that. The first
# start's database migration is done beforehand (ephemeral_api_ready), not in this wait.
# Not longer: Prefect does not notice a server that died, it waits this out.
EPHEMERAL_STARTUP_TIMEOUT_S = 60


def prefect_env() -> None:
    """Before Prefect loads: no telemetry (hosts may be offline), the engine's logs shipped,
    and room for a temporary API server to start on a busy host (a user's setting wins)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "specsweep")
    os.environ.setdefault(
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(EPHEMERAL_STARTUP_TIMEOUT_S)
    )


def ephemeral_api_ready() -> None:
    """For a command that may run on Prefect's ephemeral API (no PREFECT_API_URL): its
    database created and migrated here, before the first Prefect call starts the temporary
    server, whose startup wait a first migration outlasts (flows/prefect_api.py)."""
    prefect_env()
    from specsweep.flows.prefect_api import prepare_ephemeral_api

    started = time.monotonic()
    if prepare_ephemeral_api():
        err.print(
            f"Prefect's database for its temporary API: created and migrated in "
            f"{time.monotonic() - started:.0f} s (once per machine and Prefect version)",
            style="dim",
            soft_wrap=True,
        )


def api_url() -> str:
    """The Prefect server's URL, or a clear error saying how to start one."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise fail(
            "PREFECT_API_URL is not set: start a server (`prefect server start`) and "
            "`prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api`"
        )
    return url


def open_store(results_dir: str) -> ResultsStore:
    """The store at a path or URI; a bad URI or a missing directory is a clear error."""
    from specsweep.results.location import local_path, results_root_value
    from specsweep.results.store import ResultsStore

    try:
        results_root_value(results_dir)
    except ValueError as exc:
        raise fail(f"--results-dir: {exc}") from None
    local = local_path(results_dir)
    if local is not None and not local.is_dir():
        raise fail(f"no results directory at {local}")
    store = ResultsStore(results_dir)
    if local is None:
        try:
            store.run_ids()  # resolves the filesystem: a bad bucket or credentials fail here
        except (OSError, ValueError) as exc:
            raise fail(f"cannot read {results_dir}: {exc}") from None
    return store


def render_summary(summary: Summary, title: str) -> None:
    """The throughput table with each level's ± (half its 95% interval), ≈ on near-ties,
    the best's speedup and the variant to run; then each near-tie, the pivots and what ±
    means."""
    from specsweep.report.evidence import (
        INTERVALS_NOTE,
        best_text,
        has_intervals,
        pivot_line,
        run_text,
        skipped_cells,
        speedup_text,
        target_ci_line,
        throughput_rows,
        tie_lines,
    )
    from specsweep.report.search import search_lines

    if summary.throughput.empty:
        console.print("[red]no level completed successfully[/]")
    else:
        table = Table(title=f"{title}: output throughput (tok/s)", title_justify="left")
        table.add_column("concurrency", justify="right")
        for name in summary.throughput.columns:
            table.add_column(name, justify="right")
        table.add_column("best", style="bold")
        table.add_column("speedup", justify="right")
        best = summary.best.set_index("concurrency", drop=False)
        ties = "near_tie" in best.columns and best["near_tie"].fillna(False).astype(bool).any()
        if ties:
            table.add_column("run")  # the variant to run: the simplest of a near-tie
        cells = throughput_rows(
            summary.throughput,
            summary.throughput_lo,
            summary.throughput_hi,
            summary.best,
            skipped_cells(summary.skipped_levels),
        )
        for (c, _), row in zip(summary.throughput.iterrows(), cells, strict=True):
            rec = best.loc[c].to_dict()
            speedup = rec.get("speedup", float("nan"))
            style = "green" if speedup >= 1.0 else "red"
            text = speedup_text(rec)
            extra = [run_text(rec)] if ties else []
            table.add_row(
                str(c),
                *row,
                best_text(rec),
                f"[{style}]{text}[/]" if speedup == speedup else "—",
                *extra,
            )
        console.print(table)
        for line in tie_lines(summary.best):
            console.print(line, soft_wrap=True, markup=False)
        for variant, pivot in summary.pivots.items():
            console.print(f"  {variant}: {pivot_line(pivot)}", soft_wrap=True, markup=False)
        if has_intervals(summary.levels):
            console.print(INTERVALS_NOTE, soft_wrap=True, markup=False, style="dim")
        target = target_ci_line(summary.levels)
        if target:
            console.print(target, soft_wrap=True, markup=False, style="yellow")
    for rec in summary.failed_levels.to_dict("records"):
        console.print(
            f"[red]failed level[/] {rec['variant']} c={rec['concurrency']}: {rec['error']}"
        )
    for line in skipped_lines(summary.skipped_levels):
        console.print(f"skipped (not measured) {line}", soft_wrap=True, markup=False)
    for line in search_lines(summary.search):
        console.print(line, soft_wrap=True, markup=False, highlight=False)


def skipped_lines(skipped: pd.DataFrame) -> list[str]:
    """A search's skipped levels, one line per variant and reason: ``X c=16, 32: why``."""
    if skipped.empty:
        return []
    out = []
    for (variant, reason), group in skipped.groupby(["variant", "reason"], sort=True):
        levels = ", ".join(str(int(c)) for c in sorted(group["concurrency"]))
        out.append(f"{variant} c={levels}: {reason}")
    return out


def surface_table(grid: Surface) -> Table:
    """Load shapes (rows) x levels (columns): the variant to run and the best's speedup."""
    from rich.text import Text

    out = Table(title="Per load shape: the variant to run, speedup", title_justify="left")
    out.add_column("shape")
    for c in grid.levels:
        out.add_column(f"c={c}", justify="right")
    for shape in grid.shapes:
        cells = []
        for c in grid.levels:
            style = "green" if grid.speedup(shape, c) > 1.0 else ""
            cells.append(Text(grid.cell_text(shape, c, sep="\n"), style=style))
        out.add_row(shape, *cells)
    return out


def show_run(store: ResultsStore, run_id: str, wide: bool = False) -> None:
    """The run's decision first (what to deploy, what it measured, the verdict; one
    table of at most 100 columns), then what a reader must know about the numbers;
    `wide`: also every variant's throughput table per shape (the report has them all)."""
    from specsweep.analysis.answer import analyze_run

    levels = store.read_levels(run_id)
    run = store.read_run(run_id)
    try:
        answer = analyze_run(store, run_id)
    except (LookupError, ValueError) as exc:  # nothing measured: say so, then why
        console.print(f"[red]{exc}[/]", soft_wrap=True)
    else:
        show_decision(answer)
        if wide:
            _show_wide(store, run_id, levels, run)
        else:
            _show_apart(answer, levels)
    for name, error in json.loads((run or {}).get("variant_errors") or "{}").items():
        console.print(f"[red]failed variant[/] {name}: {error}", soft_wrap=True)
    for line in gpu_memory_lines(store.read_phase_files(run_id)):
        console.print(line, soft_wrap=True)
    note = simulated_note(levels)
    if note:
        console.print(sentence_lines(note), style="yellow", soft_wrap=True, markup=False)


def _show_apart(answer: RunAnswer, levels: pd.DataFrame) -> None:
    """Beside the decision: the shapes' load, then the first cell's search (predictions
    said apart), the levels a search skipped and those that failed."""
    from specsweep.report.evidence import load_text
    from specsweep.report.search import search_lines

    if len(answer.shapes) > 1:
        load = load_text(levels, "")
        console.print(
            f"load: {len(answer.shapes)} load shapes, {load}",
            soft_wrap=True, markup=False, highlight=False,
        )  # fmt: skip
    first = answer.first
    for line in search_lines(first.search):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    for line in skipped_lines(first.skipped_levels):
        console.print(f"skipped (not measured) {line}", soft_wrap=True, markup=False)
    for rec in first.failed_levels.to_dict("records"):
        console.print(
            f"[red]failed level[/] {rec['variant']} c={rec['concurrency']}: {rec['error']}",
            soft_wrap=True,
        )


def show_decision(answer: RunAnswer) -> None:
    """The decision as report/decision_view.py renders it, for a terminal of 100 columns."""
    from rich import box

    from specsweep.report.decision_view import (
        DECISION_COLUMNS,
        decision_rows,
    )
    from specsweep.report.shapes import load_line

    first, *others = answer.decisions.cells
    for line in first.headline():
        console.print(line, style="bold", soft_wrap=True, markup=False, highlight=False)
    load = load_line(answer)
    said = f"Measured in run {answer.run_id}." + (f" {load}" if load else "")
    console.print(sentence_lines(said), soft_wrap=True, markup=False, highlight=False)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left")
    for i, name in enumerate(DECISION_COLUMNS):
        table.add_column(name, justify="right" if i in (0, 2) else "left", overflow="fold")
    for row in decision_rows(first):
        table.add_row(*row)
    console.print(table)
    for sentence in first.level_sentences():
        text = sentence_lines(f"- {sentence}.")
        console.print(text, soft_wrap=True, markup=False, highlight=False)
    if first.deploy.command:
        console.print(command_lines("deploy:", first.deploy.command), soft_wrap=True, markup=False)
    if first.deploy.kind == "by-level":
        for note in first.deploy.notes:
            text = sentence_lines(f"- {note[0].upper()}{note[1:]}.")
            console.print(text, soft_wrap=True, markup=False, highlight=False)
    for variant, command in first.deploy.commands:
        console.print(command_lines(f"deploy {variant}:", command), soft_wrap=True, markup=False)
    for other in others:
        for line in other.headline():
            console.print(line, style="bold", soft_wrap=True, markup=False, highlight=False)


def _show_wide(
    store: ResultsStore, run_id: str, levels: pd.DataFrame, run: dict[str, object] | None
) -> None:
    """Every variant's throughput per level and shape, with the evidence (--wide)."""
    from specsweep.analysis.summary import summaries_by_shape
    from specsweep.report.evidence import load_text
    from specsweep.report.shapes import summary_surface, surface_note

    summary = summarize(
        levels,
        store.read_predictions(run_id),
        (run or {}).get("search_stop"),
        store.read_host_plans(run_id),
        store.read_phases(run_id),
    )
    parts = summaries_by_shape(summary, run)
    load = load_text(summary.levels, None if len(parts) == 1 else "")
    if load:
        shapes = f"{len(parts)} load shapes, " if len(parts) > 1 else ""
        console.print(f"load: {shapes}{load}", soft_wrap=True, markup=False, highlight=False)
    for shape, part in parts.items():
        render_summary(part, f"run {run_id}" + (f" at {shape}" if shape else ""))
    surface = summary_surface(parts)
    if surface is not None:
        console.print(surface_table(surface))
        console.print(surface_note(surface), soft_wrap=True, markup=False, style="dim")


def show_outcome(store: ResultsStore, run_id: str, answer: dict[str, object]) -> None:
    """After a sweep: its decision and summary, where the results and report are."""
    show_run(store, run_id)
    for line in answer.get("adaptive") or []:  # type: ignore[attr-defined]
        console.print(
            sentence_lines(f"adaptive: {line}"), soft_wrap=True, markup=False, highlight=False
        )
    console.print(f"results: {store.levels_dir}/{run_id}", soft_wrap=True)
    if answer.get("report_html"):
        console.print(f"report:  {answer['report_html']}", soft_wrap=True)
