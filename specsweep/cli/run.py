"""`specsweep run|demo|plan|summary`: sweeps in this process, and what they would do."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, get_args

import typer

from specsweep.cli.common import (
    ConfigOpt,
    ForceOpt,
    ResultsOpt,
    RunIdOpt,
    SetOpt,
    console,
    err,
    fail,
    load_sweep,
    open_store,
    show_run,
)
from specsweep.cli.sweep_runner import run_sweep_now
from specsweep.config.command import command_for
from specsweep.config.plan import SweepKind, sweep_variants
from specsweep.config.versions import features_needed, shown
from specsweep.search.seeds import search_plan_text
from specsweep.workloads.loaders import workload_label
from specsweep.workloads.preflight import check_load

run_app = typer.Typer(no_args_is_help=True, help="Run a sweep flow now, in this process.")

REPO_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@run_app.command("step-sweep")
def run_step_sweep(
    config: ConfigOpt, set_: SetOpt = None, run_id: RunIdOpt = None, force: ForceOpt = False
) -> None:
    """Baseline plus one speculative variant per num_steps (the step_sweep section)."""
    run_sweep_now("step-sweep", load_sweep(config, set_, "step-sweep"), run_id, force)


@run_app.command("topk-sweep")
def run_topk_sweep(
    config: ConfigOpt, set_: SetOpt = None, run_id: RunIdOpt = None, force: ForceOpt = False
) -> None:
    """Baseline plus one speculative variant per topk (the topk_sweep section)."""
    run_sweep_now("topk-sweep", load_sweep(config, set_, "topk-sweep"), run_id, force)


@run_app.command("algorithm-sweep")
def run_algorithm_sweep(
    config: ConfigOpt, set_: SetOpt = None, run_id: RunIdOpt = None, force: ForceOpt = False
) -> None:
    """Baseline plus, per enabled algorithm, its settings (the algorithm_sweep section)."""
    run_sweep_now("algorithm-sweep", load_sweep(config, set_, "algorithm-sweep"), run_id, force)


@run_app.command("matrix-sweep")
def run_matrix_sweep(
    config: ConfigOpt, set_: SetOpt = None, run_id: RunIdOpt = None, force: ForceOpt = False
) -> None:
    """Every sweep section of the config plus its explicit variants, each variant once."""
    run_sweep_now("matrix-sweep", load_sweep(config, set_), run_id, force)


def demo(set_: SetOpt = None) -> None:
    """A step sweep on the bundled SGLang simulator (no GPU): examples/sim.yaml."""
    path = REPO_EXAMPLES / "sim.yaml"
    if not path.exists():
        err.print(f"[red]demo config not found at {path}; run from a specsweep checkout[/]")
        raise typer.Exit(2)
    run_sweep_now("step-sweep", load_sweep(path, set_, "step-sweep"), None, False)


def plan(
    config: ConfigOpt,
    set_: SetOpt = None,
    sweep: Annotated[
        str,
        typer.Option(
            help="step-sweep, topk-sweep, algorithm-sweep or matrix-sweep (every section)."
        ),
    ] = "matrix-sweep",
) -> None:
    """Validate a config and print what would run, without launching anything."""
    if sweep not in get_args(SweepKind):
        raise fail(f"--sweep {sweep}: use one of {', '.join(get_args(SweepKind))}")
    kind: SweepKind = sweep  # type: ignore[assignment]
    cfg = load_sweep(config, set_, kind)
    variants = sweep_variants(cfg, kind)
    t = cfg.target
    where = f"{t.address} over SSH, workdir {t.workdir}" if t.kind == "ssh" else "this machine"
    console.print(f"target {t.name}: {where}")
    for variant in variants:
        console.print(f"[bold]{variant.label}[/]")
        console.print(f"  {command_for(cfg, variant).shell()}", soft_wrap=True)
    levels = ", ".join(f"c={c} ({cfg.load.num_requests(c)} req)" for c in cfg.load.concurrency)
    console.print(f"levels: {levels}")
    shapes = cfg.load.shape_list()
    console.print(f"shapes: {', '.join(s.label for s in shapes)} (one launch measures them all)")
    console.print(f"workload: {workload_label(cfg.load)} via {cfg.load.resolved_endpoint()}")
    cells = f"{len(cfg.load.concurrency)} levels" + (
        f" x {len(shapes)} shapes" if len(shapes) > 1 else ""
    )
    console.print(f"{len(variants)} variants x {cells}")
    verify = cfg.verify_policy is not None
    for who, feature in features_needed(variants, verify):
        console.print(
            f"[yellow]note:[/] {who} needs {feature.what} (sglang >= {shown(feature.since)}); "
            "the target's sglang is asked before the first launch",
            soft_wrap=True,
        )
    for note in check_load(cfg, variants):
        console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
    if cfg.search.adaptive:
        console.print(search_plan_text(cfg.search, variants))


def summary(
    run_id: Annotated[str | None, typer.Argument(help="Default: the latest run.")] = None,
    results_dir: ResultsOpt = "results",
    wide: Annotated[
        bool, typer.Option("--wide", help="Also every variant's throughput table (wide).")
    ] = False,
) -> None:
    """Re-render a run's decision and summary from its Parquet files."""
    store = open_store(results_dir)  # a bad URI or missing dir: a clear error, no traceback
    run_id = run_id or store.latest_run_id()
    if run_id is None:
        err.print(f"[red]no runs under {results_dir}[/]")
        raise typer.Exit(1)
    show_run(store, run_id, wide)


def register(app: typer.Typer) -> None:
    """Add these commands to the main CLI."""
    app.add_typer(run_app, name="run")
    for command in (demo, plan, summary):
        app.command()(command)
