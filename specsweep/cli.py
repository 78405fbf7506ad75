"""The `specsweep` command line: a thin adapter over config loading and the flows."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from specsweep.cli_answer import register as register_answer_commands
from specsweep.cli_deploy import register as register_deploy_commands
from specsweep.cli_fleet import register as register_fleet_commands
from specsweep.config import SweepConfig, check_run_id
from specsweep.config_file import load_config
from specsweep.errors import ConfigError, SpecsweepError
from specsweep.plan import SweepKind, sweep_variants
from specsweep.progress import progress_sink
from specsweep.results.store import ResultsStore
from specsweep.sglang_cmd import command_for
from specsweep.summary import Summary, summarize

if TYPE_CHECKING:
    import pandas as pd

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Benchmark SGLang speculative-decoding variants across concurrency levels.",
)
run_app = typer.Typer(no_args_is_help=True, help="Run a sweep flow now, in this process.")
app.add_typer(run_app, name="run")
register_deploy_commands(app)  # serve, deploy, limits
register_answer_commands(app)  # report, compare, regression
register_fleet_commands(app)  # fleet check|deploy|worker|run
# Logs and CI capture output without a terminal; rich would squeeze tables to 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

REPO_EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Sweep YAML file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config key: --set load.output_len=64 (repeatable)."),
]


def _load(
    path: Path | None, overrides: list[str] | None, kind: SweepKind = "matrix-sweep"
) -> SweepConfig:
    try:
        config = load_config(path, overrides or [])
        sweep_variants(config, kind)  # every rule, before anything starts
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    return config


def simulated_note(levels: pd.DataFrame) -> str | None:
    """Say plainly that simulated numbers are not a GPU's, and how time was scaled."""
    if levels.empty or not levels["simulated"].any():
        return None
    scales = {json.loads(e).get("SPECSWEEP_SIM_TIME_SCALE", "1") for e in levels["env"]}
    note = "simulated server: these numbers come from specsweep's performance model, not a GPU"
    if scales - {"1", "1.0"}:
        scale = ", ".join(sorted(scales))
        note += (
            f"; SPECSWEEP_SIM_TIME_SCALE={scale} compresses simulated time, so throughputs are "
            "1/scale times and latencies scale times those of the modelled GPU"
        )
    return note


def render_summary(summary: Summary, title: str) -> None:
    if summary.throughput.empty:
        console.print("[red]no level completed successfully[/]")
    else:
        table = Table(title=f"{title}: output throughput (tok/s)", title_justify="left")
        table.add_column("concurrency", justify="right")
        for name in summary.throughput.columns:
            table.add_column(name, justify="right")
        table.add_column("best", style="bold")
        table.add_column("speedup", justify="right")
        best = summary.best.set_index("concurrency")
        for c, row in summary.throughput.iterrows():
            cells = [f"{v:,.1f}" if v == v else "—" for v in row.to_numpy()]
            speedup = best.at[c, "speedup"] if "speedup" in best.columns else float("nan")
            style = "green" if speedup >= 1.0 else "red"
            table.add_row(
                str(c),
                *cells,
                str(best.at[c, "best_variant"]),
                f"[{style}]{speedup:.2f}x[/]" if speedup == speedup else "—",
            )
        console.print(table)
    for rec in summary.failed_levels.to_dict("records"):
        console.print(
            f"[red]failed level[/] {rec['variant']} c={rec['concurrency']}: {rec['error']}"
        )


def show_run(store: ResultsStore, run_id: str) -> None:
    levels = store.read_levels(run_id)
    render_summary(summarize(levels), f"run {run_id}")
    run = store.read_run(run_id)
    for name, error in json.loads((run or {}).get("variant_errors") or "{}").items():
        console.print(f"[red]failed variant[/] {name}: {error}", soft_wrap=True)
    note = simulated_note(levels)
    if note:
        console.print(f"[yellow]{note}[/]")


@contextmanager
def level_progress_bar() -> Iterator[None]:
    """A rich bar per level, fed by the engine's progress sink."""
    columns = (
        TextColumn("{task.description:<32}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        tasks: dict[tuple[str, int], TaskID] = {}

        def sink(variant: str, concurrency: int, done: int, total: int) -> None:
            key = (variant, concurrency)
            if key not in tasks:
                tasks[key] = bar.add_task(f"{variant} c={concurrency}", total=total)
            bar.update(tasks[key], completed=done, total=total)

        with progress_sink(sink):
            yield


def _run_sweep(kind: SweepKind, config: SweepConfig, run_id: str | None, force: bool) -> None:
    try:
        if run_id is not None:
            check_run_id(run_id)  # it names folders; the flow checks it too
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "specsweep")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # hosts may be offline
    # Prefect loads only when running: flows.<kind> holds the flow of the same name.
    from flows.matrix_sweep import SweepFailed
    from tasks.target_lock import ensure_target_limit, target_lock_name

    sweep_flow = getattr(import_module(f"flows.{kind.replace('-', '_')}"), kind.replace("-", "_"))
    try:
        ensure_target_limit(target_lock_name(config))  # this run's API, ephemeral or not
        with level_progress_bar():
            result = sweep_flow(config, run_id=run_id, force=force)
        run_id, code = result["run_id"], 0
        answer = result.get("answer") or {}
    except SweepFailed as exc:
        err.print(f"[bold red]{exc}[/]")
        run_id, code, answer = exc.run_id, 1, {}
    except ConfigError as exc:  # found inside the flow (e.g. the results dir), nothing ran
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    except SpecsweepError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from None
    if run_id:
        store = ResultsStore(config.results_dir)
        show_run(store, run_id)
        if answer.get("policy"):
            console.print(f"[bold]policy:[/] {answer['policy']}", soft_wrap=True)
        console.print(f"results: {store.levels_dir}/{run_id}")
        if answer.get("report_html"):
            console.print(f"report:  {answer['report_html']}")
    raise typer.Exit(code)


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


@run_app.command("step-sweep")
def run_step_sweep(
    config: ConfigOpt, set_: SetOpt = None, run_id: RunIdOpt = None, force: ForceOpt = False
) -> None:
    """Baseline plus one speculative variant per num_steps (the step_sweep section)."""
    _run_sweep("step-sweep", _load(config, set_, "step-sweep"), run_id, force)


@run_app.command("topk-sweep")
def run_topk_sweep(
    config: ConfigOpt, set_: SetOpt = None, run_id: RunIdOpt = None, force: ForceOpt = False
) -> None:
    """Baseline plus one speculative variant per topk (the topk_sweep section)."""
    _run_sweep("topk-sweep", _load(config, set_, "topk-sweep"), run_id, force)


@run_app.command("matrix-sweep")
def run_matrix_sweep(
    config: ConfigOpt, set_: SetOpt = None, run_id: RunIdOpt = None, force: ForceOpt = False
) -> None:
    """Every sweep section of the config plus its explicit variants, each variant once."""
    _run_sweep("matrix-sweep", _load(config, set_), run_id, force)


@app.command()
def demo(set_: SetOpt = None) -> None:
    """A step sweep on the bundled SGLang simulator (no GPU): examples/sim.yaml."""
    path = REPO_EXAMPLES / "sim.yaml"
    if not path.exists():
        err.print(f"[red]demo config not found at {path}; run from a specsweep checkout[/]")
        raise typer.Exit(2)
    _run_sweep("step-sweep", _load(path, set_, "step-sweep"), None, False)


@app.command()
def plan(
    config: ConfigOpt,
    set_: SetOpt = None,
    sweep: Annotated[
        str, typer.Option(help="step-sweep, topk-sweep or matrix-sweep (every section).")
    ] = "matrix-sweep",
) -> None:
    """Validate a config and print what would run, without launching anything."""
    if sweep not in get_args(SweepKind):
        err.print(
            f"[bold red]error:[/] --sweep {sweep}: use one of {', '.join(get_args(SweepKind))}"
        )
        raise typer.Exit(2)
    kind: SweepKind = sweep  # type: ignore[assignment]
    cfg = _load(config, set_, kind)
    variants = sweep_variants(cfg, kind)
    t = cfg.target
    where = f"{t.address} over SSH, workdir {t.workdir}" if t.kind == "ssh" else "this machine"
    console.print(f"target {t.name}: {where}")
    for variant in variants:
        console.print(f"[bold]{variant.label}[/]")
        console.print(f"  {command_for(cfg, variant).shell()}", soft_wrap=True)
    levels = ", ".join(f"c={c} ({cfg.load.num_requests(c)} req)" for c in cfg.load.concurrency)
    console.print(f"levels: {levels}")
    console.print(f"{len(variants)} variants x {len(cfg.load.concurrency)} levels")


@app.command()
def summary(
    run_id: Annotated[str | None, typer.Argument(help="Default: the latest run.")] = None,
    results_dir: Annotated[
        str, typer.Option(help="Results root: a path or a pyarrow URI (s3://...).")
    ] = "results",
) -> None:
    """Re-render a run's summary from its Parquet files."""
    from specsweep.cli_answer import open_store

    store = open_store(results_dir)  # a bad URI or missing dir: a clear error, no traceback
    run_id = run_id or store.latest_run_id()
    if run_id is None:
        err.print(f"[red]no runs under {results_dir}[/]")
        raise typer.Exit(1)
    show_run(store, run_id)


if __name__ == "__main__":
    app()
