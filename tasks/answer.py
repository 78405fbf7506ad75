"""Publish a finished run's answer to the Prefect UI: results table, answer, full report.

Call `publish_answer(results_dir, run_id)` from a flow after the sweep has
written its levels (the sweep flows and nightly-regression do). It reads
Parquet only, so it is safe to re-run on a retry: it re-renders the same
report from the same data and publishes new versions of the same artifact keys.

Every artifact reads in the UI with nothing beside it (specsweep/report/artifacts.py):
plots embedded as data: URIs, tables fitted to the page, the HTML report linked only
where it is served over HTTP (a browser refuses file:// from a web page).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE

from specsweep.analysis.answer import analyze_run
from specsweep.analysis.params import LatencySLO, TrafficMix
from specsweep.report.artifacts import answer_page, level_rows, report_page, served_url
from specsweep.report.decision_view import headline_lines
from specsweep.report.evidence import pivot_line
from specsweep.report.render import (
    adaptive_lines,
    default_report_dir,
    headline,
    level_records,
    search_records,
    write_report,
)
from specsweep.report.search import search_lines
from specsweep.report.shapes import load_line, policy_text, shape_cells, shape_lines
from specsweep.results.location import local_path
from specsweep.results.phases import gpu_memory_lines
from specsweep.results.store import ResultsStore

# Artifact keys (Prefect keeps every version of a key: the UI shows its history across runs).
RESULTS_KEY = "specsweep-results"
ANSWER_KEY = "specsweep-answer"
REPORT_KEY = "specsweep-report"  # the full report, as Markdown with its plots embedded
REPORT_LINK_KEY = "specsweep-report-html"  # only where the results are served over HTTP
SEARCH_KEY = "specsweep-search"  # only for a run with an adaptive search


@task(name="publish-answer", cache_policy=NO_CACHE)
def publish_answer(
    results_dir: Path | str,
    run_id: str,
    traffic: TrafficMix | None = None,
    slo: LatencySLO | None = None,
    report_dir: Path | None = None,
    report_base_url: str | None = None,
) -> dict[str, Any]:
    """Write the run's report and publish it as artifacts.

    Args:
        results_dir: Results root holding the run's Parquet files: a path or a pyarrow URI
            (s3://...; then the report is written on this machine, ./specsweep-reports/).
        run_id: The run to answer for.
        traffic: Traffic mix the policy is scored on (default uniform over levels).
        slo: Optional p99 TTFT/ITL limits the best variant and the policy must meet.
        report_dir: Where to write report.html/report.md (default <results>/reports/<run_id>).
        report_base_url: URL at which results_dir is served over HTTP, to link report.html
            (else its path is said as text: the UI cannot open a file:// link).

    Returns: run_id, policy (the one-line answer), adaptive (the verification verdicts
    and the adaptive export, lines), search (the adaptive search's lines, empty without
    one; every predicted number says so), pivots (variant -> description, with its 95% range or
    the bracket it is inconclusive in), shape (the load shape those are for: the run's
    first), shapes (every shape, in order), workload, load (the sentence that says them),
    by_shape (with several shapes: shape -> its policy and pivots), surface_plot (the
    load-shape picture's path, None for one shape), report_html and report_markdown paths,
    report_url (None unless served over HTTP), and the artifact keys.
    """
    logger = get_run_logger()
    store = ResultsStore(results_dir)
    answer = analyze_run(store, run_id, traffic, slo)
    files = write_report(answer, report_dir or default_report_dir(results_dir, run_id), True)
    url = served_url(files.html, results_dir, report_base_url)
    line = headline(answer)
    adaptive = adaptive_lines(answer)
    load = load_line(answer)
    first = answer.first  # the cell the answer opens with
    at = f" at {first.shape}" if first.shape else ""
    surface = files.plots.get("surface")  # the picture of several shapes, beside the report
    create_table_artifact(
        level_rows(level_records(answer)),
        key=RESULTS_KEY,
        description=f"run {run_id}: every measured level, one row per metric (throughput "
        "tok/s, the speedup over the baseline, latency ms, ...) with its 95% interval"
        + (f"; each row's load shape in `shape` ({', '.join(answer.shapes)})" if at else ""),
    )
    memory = gpu_memory_lines(store.read_phase_files(run_id))
    create_markdown_artifact(
        answer_page(answer, files, url, REPORT_KEY, memory),
        key=ANSWER_KEY,
        description=f"run {run_id}{at}: {line}",
    )
    search = search_lines(first.search)
    keys = [RESULTS_KEY, ANSWER_KEY, REPORT_KEY, *([REPORT_LINK_KEY] if url else [])]
    if search:
        create_table_artifact(
            search_records(answer),
            key=SEARCH_KEY,
            description=f"run {run_id}: the adaptive search, one row per variant of the grid: "
            "launched ones with how the model's before-launch prediction held, the others "
            "with their predicted (not measured) best ratio to the measured best and why "
            "they were not launched. " + " ".join(search),
        )
        keys.append(SEARCH_KEY)
    create_markdown_artifact(
        report_page(answer, files, url),
        key=REPORT_KEY,
        description=f"run {run_id}: the full report, every plot and table",
    )
    if url is not None:
        create_link_artifact(
            url,
            link_text=f"specsweep report for run {run_id} (HTML)",
            key=REPORT_LINK_KEY,
            description=f"run {run_id}: plots and tables, one self-contained HTML file",
        )
    said = [line, *([load] if load else []), *shape_lines(answer), *adaptive, *search]
    logger.info("%s\nreport: %s", "\n".join(said), files.html)
    if report_dir is None and local_path(results_dir) is None:
        logger.info(
            "results_dir %s is not on this machine: the report is written here, in %s "
            "(not uploaded)",
            results_dir,
            files.html.parent.resolve(),
        )
    return {
        "run_id": run_id,
        "policy": line,
        "headline": headline_lines(answer),
        "decided": answer.decisions.decided,
        "adaptive": adaptive,
        "search": search,
        "pivots": {v: pivot_line(p) for v, p in first.pivots.items()},
        "shape": first.shape,
        "shapes": answer.shapes,
        "workload": first.workload,
        "load": load,
        "by_shape": {
            str(one.shape): {
                "policy": policy_text(one),
                "pivots": {v: pivot_line(p) for v, p in one.pivots.items()},
            }
            for one in shape_cells(answer)
        },
        "surface_plot": str(surface) if surface else None,
        "report_html": str(files.html),
        "report_markdown": str(files.markdown),
        "report_url": url,
        "artifacts": keys,
    }
