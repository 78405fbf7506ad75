"""CLI commands that turn stored runs into answers: report, compare, regression.

They read Parquet only (no server, no Prefect), so they work on any copy of a
results directory. `register` adds them to the main `specsweep` app.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from specsweep.analysis.params import LatencySLO, RegressionPolicy, TrafficMix
from specsweep.cli.common import ResultsOpt, console, fail, open_store, surface_table

if TYPE_CHECKING:
    from specsweep.analysis.hosts import HostComparison

WeightsOpt = Annotated[
    str | None,
    typer.Option(
        "--traffic",
        help="Traffic mix as concurrency=weight pairs, e.g. 1=0.5,8=0.3,64=0.2 "
        "(share of time at each level). Default: uniform over the measured levels.",
    ),
]
TtftOpt = Annotated[float | None, typer.Option(help="SLO: TTFT p99 limit in ms.")]
ItlOpt = Annotated[float | None, typer.Option(help="SLO: ITL p99 limit in ms.")]


def parse_traffic(text: str | None) -> TrafficMix:
    """'1=0.5,8=0.3' -> TrafficMix; a malformed pair is a usage error, not a silent default."""
    if not text:
        return TrafficMix()
    weights: dict[int, float] = {}
    for pair in text.split(","):
        c, sep, w = pair.partition("=")
        try:
            if not sep:
                raise ValueError(pair)
            weights[int(c)] = float(w)
        except ValueError:
            raise fail(f"--traffic: {pair!r} is not concurrency=weight") from None
    try:
        return TrafficMix(weights=weights)
    except ValidationError as exc:
        raise fail(f"--traffic: {exc.errors()[0]['msg']}") from None


def report(
    run_id: Annotated[str | None, typer.Argument(help="Default: the latest run.")] = None,
    results_dir: ResultsOpt = "results",
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output folder. Default: <results>/reports/<run_id>; for a results root "
            "that is not on this machine (s3://...), ./specsweep-reports/<run_id>."
        ),
    ] = None,
    traffic: WeightsOpt = None,
    ttft_p99_ms: TtftOpt = None,
    itl_p99_ms: ItlOpt = None,
) -> None:
    """Write a run's report: self-contained HTML with plots, and the same tables in Markdown."""
    from specsweep.analysis.answer import analyze_run
    from specsweep.report.decision_view import headline_lines
    from specsweep.report.evidence import pivot_line, tie_lines
    from specsweep.report.render import (
        adaptive_lines,
        default_report_dir,
        plan_sentences,
        warnings,
        write_report,
    )
    from specsweep.report.search import search_lines
    from specsweep.report.shapes import answer_surface, load_line, shape_lines, surface_note
    from specsweep.results.location import local_path

    mix = parse_traffic(traffic)
    slo = LatencySLO(ttft_p99_ms=ttft_p99_ms, itl_p99_ms=itl_p99_ms)
    try:
        answer = analyze_run(open_store(results_dir), run_id, mix, slo if slo.active else None)
    except (LookupError, ValueError) as exc:
        raise fail(str(exc), 1) from None
    files = write_report(answer, out or default_report_dir(results_dir, answer.run_id))
    first = answer.first  # the cell the report opens with
    for line in headline_lines(answer):
        console.print(line, style="bold", soft_wrap=True, markup=False, highlight=False)
    load = load_line(answer)
    if load:
        console.print(load, soft_wrap=True, markup=False, highlight=False)
    for line in adaptive_lines(answer):
        console.print(line, soft_wrap=True, markup=False)
    for warning in warnings(answer):
        console.print(warning, style="yellow", markup=False, soft_wrap=True)
    if answer.multi_shape:  # the surface, then each shape's policy and pivots
        grid = answer_surface(answer)
        console.print(surface_table(grid))
        console.print(surface_note(grid), soft_wrap=True, markup=False, style="dim")
        for line in shape_lines(answer):
            console.print(line, soft_wrap=True, markup=False, highlight=False)
    else:
        for variant, pivot in first.pivots.items():
            console.print(f"  {variant}: {pivot_line(pivot)}", soft_wrap=True, markup=False)
    for line in tie_lines(first.best):  # a near-tie: which variants, and which one to run
        console.print(line, soft_wrap=True, markup=False)
    for line in search_lines(first.search):  # predictions apart, each said to be predicted
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if first.hosts is not None:
        console.print(_hosts_table(first.hosts))
    for line in plan_sentences(answer):  # a fleet's baseline plan and other GPU kinds
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(f"report: {files.html}\nmarkdown: {files.markdown}", soft_wrap=True)
    if out is None and local_path(results_dir) is None:
        console.print(
            f"(results_dir {results_dir} is not on this machine: the report was written "
            f"here, in {files.html.parent.resolve()}, not uploaded)",
            soft_wrap=True,
        )


def _hosts_table(hosts: HostComparison) -> Table:
    """The per-target summary of a run measured on several targets, for the terminal."""
    out = Table(title="Hosts", title_justify="left")
    for col in ("target", "GPU host", "GPUs", "driver", "ok", "in the answer", "shared"):
        out.add_column(col, justify="right" if col in ("ok", "shared") else "left")
    out.add_column("tok/s vs fastest", justify="right")
    out.add_column("verdict")
    for r in hosts.hosts.to_dict("records"):
        ratio = r["median_ratio"]
        verdict = f"[red]{r['verdict']}[/]" if r["slower"] else r["verdict"]
        out.add_row(
            str(r["target"]),
            str(r.get("gpu_host") or "—"),
            f"{r.get('gpu_count') or '?'}x {r.get('gpu_name') or '?'}",
            str(r.get("driver_version") or "—"),
            str(r["ok_levels"]),
            r["in_answer"] or "—",
            str(r["shared_cells"]),
            "—" if math.isnan(ratio) else _pct(ratio - 1),
            verdict,
        )
    return out


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:+.1%}"


def compare(
    run_a: Annotated[str, typer.Argument(help="The reference run.")],
    run_b: Annotated[str, typer.Argument(help="The run compared with it.")],
    results_dir: ResultsOpt = "results",
    z: Annotated[float, typer.Option(help="Noise units a change must exceed.")] = 2.0,
) -> None:
    """Per variant and level: how B's throughput and latency moved from A's, and its noise."""
    from specsweep.analysis.compare import compare_runs, environment_changes, run_changes

    store = open_store(results_dir)
    a, b = store.read_levels(run_a), store.read_levels(run_b)
    for rid, frame in ((run_a, a), (run_b, b)):
        if frame.empty:
            raise fail(f"run {rid} has no level rows under {store.levels_dir}", 1)
    table = compare_runs(a, b, z=z)
    out = Table(title=f"{run_b} vs {run_a}: output throughput", title_justify="left")
    for col in (
        "variant",
        "c",
        "A tok/s",
        "B tok/s",
        "change",
        "noise (1 SE)",
        "verdict",
        "TTFT p50",
        "ITL p50",
    ):
        out.add_column(col, justify="left" if col in ("variant", "verdict") else "right")
    styles = {"faster": "green", "slower": "red", "within noise": "", "noise unknown": "yellow"}
    for r in table.to_dict("records"):
        style = styles[r["verdict"]]
        out.add_row(
            r["variant"],
            str(r["concurrency"]),
            f"{r['throughput_a']:,.1f}",
            f"{r['throughput_b']:,.1f}",
            _pct(r["change"]),
            "unknown" if math.isnan(r["noise"]) else f"±{r['noise']:.1%}",
            f"[{style}]{r['verdict']}[/]" if style else r["verdict"],
            _pct(r["ttft_ms_p50_change"]),
            _pct(r["itl_ms_p50_change"]),
        )
    console.print(out)
    for rid, frame in ((run_a, a), (run_b, b)):
        if frame["target"].nunique() > 1:
            console.print(
                f"run {rid} was measured on {frame['target'].nunique()} targets: each variant "
                f"is compared from one of them (`specsweep report {rid}` compares the targets)",
                soft_wrap=True,
            )
    if (table["verdict"] == "noise unknown").any():
        console.print(
            "[yellow]noise unknown: measured once; set load.repeats >= 2 (or "
            "load.target_cv) to know whether a change is real[/]"
        )
    changes = environment_changes(a, b) | run_changes(store.read_run(run_a), store.read_run(run_b))
    for key, (old, new) in changes.items():
        console.print(f"changed: {key}: {old} -> {new}", soft_wrap=True)


def regression(
    run_id: Annotated[str | None, typer.Argument(help="Default: the latest run.")] = None,
    results_dir: ResultsOpt = "results",
    history_runs: Annotated[int, typer.Option(help="Earlier runs to compare with.")] = 7,
    min_history: Annotated[int, typer.Option(help="Fewer: 'insufficient history'.")] = 3,
) -> None:
    """Judge a stored run against its own history (exit 1 on a regression)."""
    from specsweep.analysis.regression import judge_stored_run

    store = open_store(results_dir)
    run_id = run_id or store.latest_run_id()
    if run_id is None:
        raise fail(f"no runs under {results_dir}", 1)
    policy = RegressionPolicy(history_runs=history_runs, min_history=min_history)
    try:
        verdict = judge_stored_run(store, run_id, policy)
    except ValueError as exc:
        raise fail(str(exc), 1) from None
    console.print(verdict.message(), soft_wrap=True)
    raise typer.Exit(1 if verdict.regressed else 0)


def register(app: typer.Typer) -> None:
    """Add report, compare and regression to the main app."""
    app.command()(report)
    app.command()(compare)
    app.command()(regression)
