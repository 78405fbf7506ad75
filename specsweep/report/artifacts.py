"""A run's answer and report as pages that read in the Prefect UI with nothing beside them.

The UI renders a Markdown artifact in the browser, which refuses ``file://`` images and
links, and lays it out in a column ~870 px wide at a 1440-px window, where a table's
cells never wrap: a wide table scrolls sideways out of sight. So here every plot travels
inside the page as a ``data:`` URI (a small palette PNG, figure.inline_png), the HTML
report is linked only where it is served over HTTP (else its path is said as text), and
every table is fitted to the column by fit_tables. The same for the results table
artifact: one row per level and metric (level_rows), a few columns wide.
"""

from __future__ import annotations

import base64
import math
import re
import socket
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from specsweep.analysis.answer import RunAnswer
from specsweep.report.prose import fit_text
from specsweep.report.render import ReportFiles, answer_markdown, markdown, report_link

# Measured in Chromium on Prefect 3.9's artifact page at --window-size=1440,1000: the
# Markdown column is 868 px wide; a table cell has 12 px of padding a side and a 1-px
# border; the 14-px Inter font's characters fall in three widths (canvas measureText).
TABLE_PX = 850  # the width a fitted table is estimated to stay within (2% kept back)
CELL_PX = 25
_NARROW = frozenset(" !',.:;Iijl|`")  # ~3.9 px
_SMALL = frozenset('()[]{}/\\frt1*-_"^')  # ~5.5 px
_WIDE = frozenset("%@MWmw—…")  # ~13 px; the rest (letters, digits, ±≈) ~8.4 px
BOLD = 1.06  # headers and **bold** cells are this much wider
TEXT_CHARS = 40  # a long text cell is first wrapped to lines of this many characters
MIN_TEXT_CHARS = 18  # and narrowed no further before the table is split by columns

_SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")
_PIPE = re.compile(r"(?<!\\)\|")


def data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI, which a browser shows with no file or server behind it."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def served_url(html: Path, results_dir: Path | str, base_url: str | None) -> str | None:
    """The report's http(s) URL where the results are served at `base_url`, else None."""
    link = report_link(html, results_dir, base_url)
    return link if link.startswith(("http://", "https://")) else None


def report_where(html: Path, url: str | None) -> str:
    """Where the report is as one HTML file: a link when served, else its path as text
    (a browser will not open a file:// link from a web page)."""
    if url is not None:
        return f"As one HTML file: [{html.name}]({url})."
    return (
        f"As one HTML file: `{html.resolve()}` on {socket.gethostname()} (not served over "
        "HTTP; publish_answer's report_base_url links it where the results are served)."
    )


def answer_page(
    answer: RunAnswer,
    files: ReportFiles,
    url: str | None = None,
    report_artifact: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The answer artifact: the answer with its key plots in place and tables that fit.

    `files`: write_report(..., inline=True)'s; `url`: the HTML report's when served;
    `report_artifact`: the key of the artifact that holds the full report; `notes`: see
    answer_markdown."""
    images = {name: data_uri(data) for name, data in files.inline.items()}
    full = "Full report (every plot and table)" + (
        f": this run's `{report_artifact}` artifact." if report_artifact else "."
    )
    report = [full, report_where(files.html, url)]
    return fit_tables(fit_text(answer_markdown(answer, images, report, notes)))


def report_page(answer: RunAnswer, files: ReportFiles, url: str | None = None) -> str:
    """The full report as one Markdown page: report.md with its plots embedded, and its
    tables fitted; the HTML file linked where it is served."""
    images = {name: data_uri(data) for name, data in files.inline.items()}
    page = markdown(answer, images, files.tables or None).rstrip("\n")
    return fit_tables(fit_text(f"{page}\n\n{report_where(files.html, url)}\n"))


def fit_tables(text: str, width_px: float = TABLE_PX) -> str:
    """Every Markdown table in `text` made to fit `width_px`, by estimate: long cells
    wrapped at spaces (``<br>``), then, if it is still too wide, split by columns into
    parts that each repeat the first column. Nothing is dropped; a table that fits is
    left as it is."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            out += _fit([_cells(row) for row in [lines[i], *lines[i + 2 : end]]],
                        _cells(lines[i + 1]), width_px)  # fmt: skip
            i = end
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in _PIPE.split(row.strip())[1:-1]]


def _shown(cell: str) -> list[str]:
    """A cell's lines as the browser shows them (no markup)."""
    return [part.replace("**", "").replace("\\|", "|") for part in cell.split("<br>")]


def text_px(line: str) -> float:
    """A line's estimated width in the UI's table font."""
    return sum(
        3.9 if c in _NARROW else 5.5 if c in _SMALL else 13.0 if c in _WIDE else 8.4 for c in line
    )


def cell_px(cell: str, header: bool = False) -> float:
    """A cell's estimated width in the UI, padding included."""
    bold = BOLD if header or "**" in cell else 1.0
    return max(text_px(line) for line in _shown(cell)) * bold + CELL_PX


def column_px(grid: list[list[str]]) -> list[float]:
    """Each column's estimated width: its widest cell's, the header (row 0) in bold."""
    return [
        max(cell_px(row[j], header=i == 0) for i, row in enumerate(grid))
        for j in range(len(grid[0]))
    ]


def _wrap(cell: str, chars: int) -> str:
    """The cell's text in lines of at most `chars` characters, broken at spaces only."""
    if max(len(line) for line in _shown(cell)) <= chars:
        return cell
    text = " ".join(cell.split("<br>"))
    return "<br>".join(textwrap.wrap(text, chars, break_long_words=False, break_on_hyphens=False))


# How a table too wide is narrowed, the least harm first: (which columns, which rows,
# the line length in characters for a column's cells); taken only while it is too wide.
_Chars = Callable[[list[str]], int]


def _words(least: int) -> _Chars:
    """Lines no shorter than `least`, nor than the column's longest word (+2: "≈ 1,409.0"),
    so that a column's cells break alike."""
    return lambda cells: max([least, *(len(w) + 2 for c in cells for w in _words_of(c))])


def _words_of(cell: str) -> list[str]:
    return " ".join(_shown(cell)).split()


def _steps(aligns: list[str]) -> list[tuple[list[int], slice, _Chars]]:
    numeric = [j for j, a in enumerate(aligns) if a.endswith(":")]
    text = [j for j in range(len(aligns)) if j not in numeric]
    body = slice(1, None)
    return [
        (text, body, lambda _: TEXT_CHARS),  # long sentences in 40-character lines
        (list(range(len(aligns))), slice(0, 1), _words(14)),  # headers at their words
        (numeric, body, lambda _: 24),  # a long number cell in two lines
        (text, body, lambda _: TEXT_CHARS - 8),
        (numeric, body, _words(6)),  # a number and its interval, each on its line
        *((text, body, lambda _, k=k: k) for k in range(TEXT_CHARS - 16, MIN_TEXT_CHARS - 1, -6)),
    ]


def _narrow(grid: list[list[str]], aligns: list[str], width: float, steps: int = 99) -> bool:
    """Take the first `steps` narrowing steps while `grid` is wider than `width`, in place;
    whether it fits."""
    for cols, rows, chars in _steps(aligns)[:steps]:
        if sum(column_px(grid)) <= width:
            break
        for j in cols:
            limit = chars([row[j] for row in grid[rows]])
            for row in grid[rows]:
                row[j] = _wrap(row[j], limit)
    return sum(column_px(grid)) <= width


def _fit(grid: list[list[str]], aligns: list[str], width: float) -> list[str]:
    """The table in lines, narrowed to `width`; where narrowing is not enough, split by
    columns (from its long text and headers wrapped, numbers whole), each part narrowed."""
    whole = [list(row) for row in grid]
    if _narrow(whole, aligns, width):
        parts = [(list(range(len(aligns))), whole)]
    else:
        _narrow(grid, aligns, width, steps=2)
        parts = []
        for cols in _column_parts(column_px(grid), width):
            part = [[row[j] for j in cols] for row in grid]
            _narrow(part, [aligns[j] for j in cols], width)
            parts.append((cols, part))
    out: list[str] = []
    for k, (cols, part) in enumerate(parts):
        if k:
            span = f"columns {cols[1] + 1} to {cols[-1] + 1} of {len(aligns)}"
            out += ["", f"*(the same rows, continued: {span})*", ""]
        out.append(_row(part[0]))
        out.append("|" + "|".join(aligns[j] for j in cols) + "|")
        out += [_row(row) for row in part[1:]]
    return out


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _column_parts(widths: list[float], width: float) -> list[list[int]]:
    """Column groups that each fit `width` with the first column repeated, as even as the
    widths allow; one group when the whole fits (or only one column is there to move)."""
    rest = list(range(1, len(widths)))
    if sum(widths) <= width or not rest:
        return [list(range(len(widths)))]
    room = max(width - widths[0], 1.0)
    count = max(2, math.ceil(sum(widths[j] for j in rest) / room))
    while True:
        target = sum(widths[j] for j in rest) / count
        parts: list[list[int]] = [[0]]
        used = 0.0
        for j in rest:
            if len(parts[-1]) > 1 and (used + widths[j] > room or used >= target):
                parts.append([0])
                used = 0.0
            parts[-1].append(j)
            used += widths[j]
        if len(parts) <= count or count >= len(rest):
            return parts
        count += 1


# The results table artifact, one row per level and metric: (column in level_records,
# the metric's name, its interval's columns or None).
LEVEL_METRICS: list[tuple[str, str, tuple[str, str] | None]] = [
    ("output_throughput", "output tok/s", ("output_throughput_lo", "output_throughput_hi")),
    ("speedup_vs_baseline", "speedup", ("speedup_lo", "speedup_hi")),  # over the baseline
    ("ttft_ms_p50", "TTFT p50 ms", ("ttft_ms_p50_lo", "ttft_ms_p50_hi")),
    ("ttft_ms_p99", "TTFT p99 ms", ("ttft_ms_p99_lo", "ttft_ms_p99_hi")),
    ("itl_ms_p50", "ITL p50 ms", ("itl_ms_p50_lo", "itl_ms_p50_hi")),
    ("itl_ms_p99", "ITL p99 ms", ("itl_ms_p99_lo", "itl_ms_p99_hi")),
    ("accept_length", "accept length", None),
    ("repeats", "repeats", None),
    ("output_throughput_cv", "throughput CV", None),
    ("target_ci", "target CI", None),
    ("target_ci_met", "target CI met", None),
]
# What says which level a row is (level_records' column: the table's); short names, as
# every column counts at the UI's width.
LEVEL_KEYS = {
    "shape": "shape",
    "target": "target",
    "variant": "variant",
    "concurrency": "c",
    "status": "status",
    "in_answer": "in answer",
}


def level_rows(records: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """level_records' wide rows (30 columns) as one row per level and metric, with its 95%
    interval (`95% lo`, `95% hi`, None where the level has none): the same numbers in a
    table a few columns wide. A metric a level has no value for gets no row."""
    keys = [k for k in LEVEL_KEYS if any(k in r for r in records)]
    known = set(keys) | {c for m, _, iv in LEVEL_METRICS for c in (m, *(iv or ()))}
    extra = [k for k in dict.fromkeys(k for r in records for k in r) if k not in known]
    metrics = LEVEL_METRICS + [(k, k, None) for k in extra]  # a column added later: kept
    rows = []
    for rec in records:
        ids = {LEVEL_KEYS[k]: rec.get(k) for k in keys}
        for column, name, interval in metrics:
            if rec.get(column) is None:
                continue
            lo, hi = (rec.get(interval[0]), rec.get(interval[1])) if interval else (None, None)
            rows.append(ids | {"metric": name, "value": rec[column], "95% lo": lo, "95% hi": hi})
    return rows
