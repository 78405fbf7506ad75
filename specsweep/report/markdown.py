"""The summary as Markdown: for Prefect artifacts, logs and CI job summaries.

The same evidence as the report (report/evidence.py): ``±`` half of each level's 95%
interval, the best's speedup and lead over the runner-up, ``≈`` near-ties with the
variant to run, and each pivot's range or the bracket it is inconclusive in.
"""

from __future__ import annotations

from specsweep.analysis.summary import Summary, summaries_by_shape
from specsweep.report.evidence import (
    BEST_HEADER,
    INTERVALS_NOTE,
    at_text,
    best_note,
    best_rows,
    has_intervals,
    load_text,
    pivot_line,
    skipped_cells,
    target_ci_line,
    throughput_rows,
)
from specsweep.report.search import search_lines
from specsweep.report.shapes import summary_surface, surface_cells, surface_note


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(t.replace("|", "\\|") for t in cells) + " |"


def summary_markdown(
    run_id: str,
    summary: Summary,
    variant_errors: dict[str, str],
    notes: list[str] | None = None,
) -> str:
    """``notes``: lines said after the tables (the GPUs' memory before and after).

    Each table says the load shape and workload it was measured under; a run of several
    shapes gets the surface (the variant to run and its speedup per shape and level), then
    each shape's tables, best per level and pivots on its own."""
    lines = [f"## specsweep run `{run_id}`", ""]
    parts = summaries_by_shape(summary)
    surface = summary_surface(parts)
    if surface is None:
        load = load_text(summary.levels)
        lines += [f"Load: {load}.", ""] if load else []
        lines += _levels_markdown(summary, at_text(summary.levels))
        lines += _failures(summary)
    else:
        sent = load_text(summary.levels, "")
        lines += [
            f"Load: {len(parts)} shapes ({', '.join(map(str, parts))})"
            + (f", {sent}" if sent else "")
            + ". Each shape is answered on its own cells.",
            "",
            "Per load shape and concurrency, the variant to run and the best's speedup:",
            "",
        ]
        header, rows = surface_cells(surface)
        lines.append(_row(header))
        lines.append("|---|" + "---:|" * (len(header) - 1))
        lines += [_row(r) for r in rows]
        lines += ["", surface_note(surface)]
        for shape, part in parts.items():
            lines += ["", f"### {shape}", ""]
            lines += _levels_markdown(part, at_text(part.levels, shape))
            lines += _failures(part)
    search = search_lines(summary.search)
    if search:
        lines += ["", *search]
    if variant_errors:
        lines += ["", "Failed variants:", ""]
        lines += [f"- {name}: {error}" for name, error in variant_errors.items()]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _levels_markdown(summary: Summary, at: str) -> list[str]:
    """The throughput table, best per level and pivots of one shape's summary."""
    if summary.throughput.empty:
        return ["No level completed successfully."]
    lines = []
    table = summary.throughput
    lines.append(f"Output throughput (tok/s) per variant and concurrency{at}:")
    lines.append("")
    lines.append(_row(["concurrency", *map(str, table.columns)]))
    lines.append("|---:|" + "---:|" * len(table.columns))
    skipped = skipped_cells(summary.skipped_levels)
    cells = throughput_rows(
        table, summary.throughput_lo, summary.throughput_hi, summary.best, skipped
    )
    for c, row in zip(table.index, cells, strict=True):
        lines.append(_row([str(c), *row]))
    lines += ["", f"Best per level{at}:", ""]
    lines.append(_row(BEST_HEADER))
    lines.append("|---:|---|---:|---:|---|---|")
    lines += [_row(r) for r in best_rows(summary.best)]
    lines += ["", best_note(summary.best)]
    if summary.pivots:
        lines += ["", f"Pivots (where speculation stops paying){at}:", ""]
        for variant, pivot in summary.pivots.items():
            lines.append(f"- {variant}: {pivot_line(pivot)}")
    if has_intervals(summary.levels):
        lines += ["", INTERVALS_NOTE]
    target = target_ci_line(summary.levels)
    if target:
        lines += ["", target]
    return lines


def _failures(summary: Summary) -> list[str]:
    lines = []
    if not summary.failed_levels.empty:
        lines += ["", "Failed levels:", ""]
        for rec in summary.failed_levels.to_dict("records"):
            lines.append(f"- {rec['variant']} c={rec['concurrency']}: {rec['error']}")
    if not summary.skipped_levels.empty:
        lines += ["", "Skipped by the search (not measured, not failures):", ""]
        for rec in summary.skipped_levels.to_dict("records"):
            lines.append(f"- {rec['variant']} c={rec['concurrency']}: {rec['reason']}")
    return lines
