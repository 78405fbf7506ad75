"""The summary as Markdown: for Prefect artifacts, logs and CI job summaries.

The same evidence as the report (report/evidence.py): ``±`` half of each level's 95%
interval, the best's speedup and lead over the runner-up, ``≈`` near-ties with the
variant to run, and each pivot's range or the bracket it is inconclusive in.
"""

from __future__ import annotations

from specsweep.analysis.summary import Summary
from specsweep.report.evidence import (
    BEST_HEADER,
    INTERVALS_NOTE,
    best_note,
    best_rows,
    has_intervals,
    pivot_line,
    skipped_cells,
    target_ci_line,
    throughput_rows,
)
from specsweep.report.search import search_lines


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(t.replace("|", "\\|") for t in cells) + " |"


def summary_markdown(
    run_id: str,
    summary: Summary,
    variant_errors: dict[str, str],
    notes: list[str] | None = None,
) -> str:
    """``notes``: lines said after the tables (the GPUs' memory before and after)."""
    lines = [f"## specsweep run `{run_id}`", ""]
    if summary.throughput.empty:
        lines.append("No level completed successfully.")
    else:
        table = summary.throughput
        lines.append("Output throughput (tok/s) per variant and concurrency:")
        lines.append("")
        lines.append(_row(["concurrency", *map(str, table.columns)]))
        lines.append("|---:|" + "---:|" * len(table.columns))
        skipped = skipped_cells(summary.skipped_levels)
        cells = throughput_rows(
            table, summary.throughput_lo, summary.throughput_hi, summary.best, skipped
        )
        for c, row in zip(table.index, cells, strict=True):
            lines.append(_row([str(c), *row]))
        lines += ["", "Best per level:", ""]
        lines.append(_row(BEST_HEADER))
        lines.append("|---:|---|---:|---:|---|---|")
        lines += [_row(r) for r in best_rows(summary.best)]
        lines += ["", best_note(summary.best)]
        if summary.pivots:
            lines += ["", "Pivots (where speculation stops paying):", ""]
            for variant, pivot in summary.pivots.items():
                lines.append(f"- {variant}: {pivot_line(pivot)}")
        if has_intervals(summary.levels):
            lines += ["", INTERVALS_NOTE]
        target = target_ci_line(summary.levels)
        if target:
            lines += ["", target]
    if not summary.failed_levels.empty:
        lines += ["", "Failed levels:", ""]
        for rec in summary.failed_levels.to_dict("records"):
            lines.append(f"- {rec['variant']} c={rec['concurrency']}: {rec['error']}")
    if not summary.skipped_levels.empty:
        lines += ["", "Skipped by the search (not measured, not failures):", ""]
        for rec in summary.skipped_levels.to_dict("records"):
            lines.append(f"- {rec['variant']} c={rec['concurrency']}: {rec['reason']}")
    search = search_lines(summary.search)
    if search:
        lines += ["", *search]
    if variant_errors:
        lines += ["", "Failed variants:", ""]
        lines += [f"- {name}: {error}" for name, error in variant_errors.items()]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
