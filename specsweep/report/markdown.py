"""The run summary as Markdown (Prefect artifacts, CI job summaries) and as plain text
with aligned columns (a run's log, which shows Markdown as its raw pipes).

The same evidence as the report (report/evidence.py): ``±`` half of each level's 95%
interval, the best's speedup and lead over the runner-up, ``≈`` near-ties with the
variant to run, and each pivot's range or the bracket it is inconclusive in. Both forms
come from one list of lines and tables (`_summary`), so they never say different things.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from specsweep.analysis.summary import Summary, summaries_by_shape
from specsweep.report.caveats import sentence, simulated_note
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


@dataclass(frozen=True)
class Grid:
    """A table of the summary: its header, rows and which columns are numbers."""

    header: list[str]
    rows: list[list[str]]
    numeric: list[bool]


Line = str | Grid  # a line of Markdown text, or a table


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
    lines: list[str] = []
    for line in _summary(run_id, summary, variant_errors, notes):
        if isinstance(line, Grid):
            lines.append(_row(line.header))
            lines.append("|" + "|".join("---:" if n else "---" for n in line.numeric) + "|")
            lines += [_row(r) for r in line.rows]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def summary_text(
    run_id: str,
    summary: Summary,
    variant_errors: dict[str, str],
    notes: list[str] | None = None,
) -> str:
    """The summary_markdown's content as plain text for a log: each table in aligned
    columns (text_table), no Markdown markup."""
    lines: list[str] = []
    for line in _summary(run_id, summary, variant_errors, notes):
        lines += text_table(line) if isinstance(line, Grid) else [_plain(line)]
    return "\n".join(lines) + "\n"


# A Prefect run log wraps its lines at ~127 characters at a 1440-px window (Inconsolata,
# ~7 px); a table kept under this keeps its columns.
TEXT_WIDTH = 120
MIN_TEXT_COLUMN = 16  # a text column is wrapped no narrower than this


def text_table(grid: Grid, width: int = TEXT_WIDTH) -> list[str]:
    """A table in fixed-width columns two spaces apart (numbers right-aligned), its header
    ruled off with dashes; a text column is wrapped at spaces, widest first, until the table
    is at most `width` characters or no text column can give more."""
    table = [[[cell] for cell in row] for row in [grid.header, *grid.rows]]
    columns = len(grid.header)

    def widths() -> list[int]:
        return [max(len(line) for row in table for line in row[j]) for j in range(columns)]

    text = [j for j, numeric in enumerate(grid.numeric) if not numeric]
    for _ in range(3):  # words longer than a column's share keep it wider: try again
        now = widths()
        over = sum(now) + 2 * (columns - 1) - width
        if over <= 0 or not text:
            break
        level = _level([now[j] for j in text], over)  # the text columns' common cap
        for j in text:
            if now[j] > level:
                for row in table:
                    joined = " ".join(row[j])
                    row[j] = textwrap.wrap(joined, level, break_on_hyphens=False) or [""]
    final = widths()
    out = []
    for i, row in enumerate(table):
        for k in range(max(len(cell) for cell in row)):
            cells = [cell[k] if k < len(cell) else "" for cell in row]
            out.append(
                "  ".join(
                    c.rjust(w) if n else c.ljust(w)
                    for c, w, n in zip(cells, final, grid.numeric, strict=True)
                ).rstrip()
            )
        if i == 0:
            out.append("  ".join("-" * w for w in final))
    return out


def _level(widths: list[int], over: int) -> int:
    """The cap on these column widths that takes `over` characters off in all (no column
    capped below MIN_TEXT_COLUMN), the widest first."""
    level = max(widths)
    while level > MIN_TEXT_COLUMN and sum(w - min(w, level) for w in widths) < over:
        level -= 1
    return level


def _plain(line: str) -> str:
    """A Markdown line as text: no heading marks, no code backticks."""
    return re.sub(r"^#+ ", "", line).replace("`", "")


def _summary(
    run_id: str,
    summary: Summary,
    variant_errors: dict[str, str],
    notes: list[str] | None = None,
) -> list[Line]:
    """The summary's lines and tables, in order (see summary_markdown)."""
    lines: list[Line] = [f"## specsweep run `{run_id}`", ""]
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
        lines.append(Grid(header, rows, [False] + [True] * (len(header) - 1)))
        lines += ["", surface_note(surface)]
        for shape, part in parts.items():
            lines += ["", f"### {shape}", ""]
            lines += _levels_markdown(part, at_text(part.levels, shape))
            lines += _failures(part)
    for line in search_lines(summary.search):  # each a paragraph: Markdown joins lines
        lines += ["", sentence(line)]
    if variant_errors:
        lines += ["", "Failed variants:", ""]
        lines += [f"- {name}: {error}" for name, error in variant_errors.items()]
    simulated = simulated_note(summary.levels)  # as the CLI says it after its summary
    notes = [*(notes or []), *([sentence(simulated)] if simulated else [])]
    if notes:
        lines += ["", *notes]
    return lines


def _levels_markdown(summary: Summary, at: str) -> list[Line]:
    """The throughput table, best per level and pivots of one shape's summary."""
    if summary.throughput.empty:
        return ["No level completed successfully."]
    lines: list[Line] = []
    table = summary.throughput
    lines.append(f"Output throughput (tok/s) per variant and concurrency{at}:")
    lines.append("")
    skipped = skipped_cells(summary.skipped_levels)
    cells = throughput_rows(
        table, summary.throughput_lo, summary.throughput_hi, summary.best, skipped
    )
    rows = [[str(c), *row] for c, row in zip(table.index, cells, strict=True)]
    header = ["concurrency", *map(str, table.columns)]
    lines.append(Grid(header, rows, [True] * len(header)))
    lines += ["", f"Best per level{at}:", ""]
    lines.append(
        Grid(BEST_HEADER, best_rows(summary.best), [True, False, True, True, False, False])
    )
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
