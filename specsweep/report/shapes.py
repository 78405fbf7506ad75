"""How a run over several load shapes reads, wherever its answer is shown: the report's
Load shapes section, the answer artifact, the run summary and the CLI.

Each shape is answered on its own (analysis/shapes.py): the top of every view stays the
first shape's answer, labelled with its shape, and the surface (shape x concurrency: the
variant to run and the best's speedup over the baseline) says how the answer moves with
the shape. A single-shape run gets none of this, only its shape and workload said.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from specsweep.analysis.answer import CellAnswer, RunAnswer
from specsweep.analysis.levels import baseline_name
from specsweep.analysis.shapes import surface_table
from specsweep.analysis.summary import Summary
from specsweep.report.evidence import TIE, is_tie, load_text, pivot_line, pm
from specsweep.report.prose import paragraph
from specsweep.report.tables import (
    Table,
    best_table,
    category_table,
    export_table,
    pivot_table,
)

SURFACE_NOTE = (
    "Each cell: the variant to run at that shape and concurrency (the simplest of a "
    f"near-tie, marked {TIE}) and the best's speedup over the baseline, ± half its 95% "
    "interval where the levels carry one. Each shape is answered on its own cells, with "
    "its own pivot and policy."
)


def load_line(answer: RunAnswer) -> str | None:
    """What the answer at the top (the first cell) was measured under; with several shapes,
    which one it is and where the others are. None when the rows say neither shape nor
    workload."""
    first = answer.first
    text = load_text(first.levels, first.shape)
    if not answer.multi_shape:
        return f"Load: {text}." if text else None
    return (
        f"Load: {text}. This run measured {len(answer.shapes)} load shapes "
        f"({', '.join(answer.shapes)}): the answer, plots and tables before Load shapes are "
        f"for {first.shape}, the first; Load shapes answers each shape on its own."
    )


def short_names(variants: Iterable[str], baseline: str | None) -> tuple[dict[str, str], str]:
    """Names for a small cell: the speculative variants without the first name segment they
    all share (``eagle3-s2-k1-d3`` -> ``s2-k1-d3``); (names, the prefix dropped or "")."""
    names = sorted({str(v) for v in variants if v is not None and not pd.isna(v)})
    spec = [v for v in names if v != baseline]
    heads = {v.split("-", 1)[0] for v in spec}
    if len(heads) != 1 or any("-" not in v for v in spec):
        return {v: v for v in names}, ""
    prefix = f"{heads.pop()}-"
    return {v: v.removeprefix(prefix) if v != baseline else v for v in names}, prefix


@dataclass(frozen=True)
class Surface:
    """The surface as a grid: shapes (rows, the run's order) x levels (columns)."""

    shapes: list[str]
    levels: list[int]
    cells: dict[tuple[str, int], dict[str, Any]]  # (shape, concurrency) -> surface row
    names: dict[str, str]  # variant -> its short name
    prefix: str  # the name prefix the short names drop ("" when none)

    def speedup(self, shape: str, c: int) -> float:
        rec = self.cells.get((shape, c))
        value = rec.get("speedup") if rec else None
        return float(value) if value is not None and not pd.isna(value) else math.nan

    def choice(self, shape: str, c: int) -> str | None:
        rec = self.cells.get((shape, c))
        if rec is None:
            return None
        name = rec.get("choice")
        if name is None or pd.isna(name):
            name = rec.get("best_variant")
        return None if name is None or pd.isna(name) else str(name)

    def tie(self, shape: str, c: int) -> bool:
        rec = self.cells.get((shape, c))
        return bool(rec) and is_tie(rec)  # type: ignore[arg-type]

    def speedup_text(self, shape: str, c: int) -> str:
        """``1.45x ±2.1%``; exactly ``1.00x`` where the baseline is the best."""
        rec = self.cells.get((shape, c))
        value = self.speedup(shape, c)
        if rec is None or math.isnan(value):
            return "—"
        lo, hi = rec.get("speedup_lo"), rec.get("speedup_hi")
        if lo is not None and hi is not None and lo == hi == value:
            return f"{value:.2f}x"  # the baseline is the best: no interval
        return pm(value, lo, hi, ".2f", "x")

    def cell_text(self, shape: str, c: int, sep: str = " ") -> str:
        """``≈ s2-k1-d3 1.45x ±2.1%`` (``—`` where the cell was not measured); where the
        choice is a simpler variant tied with the best, the speedup is the best's and says
        so: ``≈ baseline (best s3-k1-d4 1.21x ±19.0%)``."""
        name = self.choice(shape, c)
        if name is None:
            return "—"
        mark = f"{TIE} " if self.tie(shape, c) else ""
        speedup = self.speedup_text(shape, c)
        rec = self.cells.get((shape, c)) or {}
        best = rec.get("best_variant")
        if isinstance(best, str) and best != name:
            short = self.names.get(best, best)
            speedup = f"best {short}{sep}{speedup}" if sep == "\n" else f"(best {short} {speedup})"
        return f"{mark}{self.names.get(name, name)}{sep}{speedup}"


def surface_grid(surface: pd.DataFrame, shapes: list[str], baseline: str | None = None) -> Surface:
    """A surface table (analysis/shapes.SURFACE_COLUMNS) as a grid in `shapes`' order."""
    rows = surface.to_dict("records")
    levels = sorted({int(r["concurrency"]) for r in rows})
    cells = {(str(r["shape"]), int(r["concurrency"])): r for r in rows}
    names, prefix = short_names(
        [*surface.get("choice", []), *surface.get("best_variant", [])], baseline
    )
    present = {shape for shape, _ in cells}
    return Surface([s for s in shapes if s in present], levels, cells, names, prefix)


def answer_surface(answer: RunAnswer) -> Surface:
    return surface_grid(answer.surface, answer.shapes, baseline_name(answer.first.levels))


def surface_note(surface: Surface) -> str:
    if not surface.prefix:
        return SURFACE_NOTE
    return f"{SURFACE_NOTE} Variant names without their common prefix {surface.prefix!r}."


def surface_cells(surface: Surface) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the surface: one row per shape, one column per level."""
    header = ["shape", *(f"c={c}" for c in surface.levels)]
    rows = [[s, *(surface.cell_text(s, c) for c in surface.levels)] for s in surface.shapes]
    return header, rows


def surface_table_view(answer: RunAnswer, title: str | None = None) -> Table | None:
    """The surface as a table (None for a single-shape run)."""
    if not answer.multi_shape or answer.surface.empty:
        return None
    grid = answer_surface(answer)
    header, rows = surface_cells(grid)
    return Table(
        title or "Per load shape and concurrency: the variant to run, and the best's speedup",
        header,
        rows,
        [False, *([True] * len(grid.levels))],
        note=surface_note(grid),
    )


def pivot_summary(answer: CellAnswer) -> str:
    """``eagle3-s2-k1-d3: pivot at c≈22.6`` per variant, or why there is none."""
    if not answer.pivots:
        return "no pivot (no speculative variant measured against a baseline)"
    return "; ".join(f"{v}: {pivot_line(p)}" for v, p in answer.pivots.items())


def policy_text(answer: CellAnswer) -> str:
    """The cell's decision in one paragraph (its headline, without the cell's name)."""
    label = answer.decision.label
    lines = answer.decision.headline()
    lines[0] = lines[0].removeprefix(f"At {label}: ") if label else lines[0]
    return " ".join(lines)


def shape_cells(answer: RunAnswer) -> tuple[CellAnswer, ...]:
    """The cells the Load shapes views list: the first GPU kind's, shape by shape (none
    for a single-shape run)."""
    return answer.cells_of(answer.first.gpu_kind) if answer.multi_shape else ()


def shape_lines(answer: RunAnswer) -> list[str]:
    """One block per shape (several shapes only): its load, its policy, its pivots."""
    out = []
    for one in shape_cells(answer):
        shape = one.shape
        sent = load_text(one.levels, "")  # "": the workload alone, the shape leads the line
        out.append(f"{shape}{f' ({sent})' if sent else ''}: {policy_text(one)}")
        out.append(f"  pivots at {shape}: {pivot_summary(one)}")
    return out


@dataclass(frozen=True)
class ShapeSection:
    """One shape's part of the Load shapes section."""

    shape: str
    load: str  # in4096-out256, builtin prompts via chat
    policy: str  # its policy line, or why there is none
    tables: list[Table]  # best per level, pivots, export (when there is one), categories
    export_note: str | None  # why this shape has no export (None when it has one)


def shape_sections(answer: RunAnswer) -> list[ShapeSection]:
    """Every shape's own answer, in the run's order (empty for a single-shape run)."""
    out = []
    for one in shape_cells(answer):
        shape = str(one.shape)
        tables = [
            best_table(one),
            pivot_table(one) if one.pivots else None,
            export_table(one),
            category_table(one),
        ]
        refused = None
        if one.export is None:
            refused = paragraph(
                f"No adaptive tiers at {shape}: {one.export_refused or 'nothing to export'}"
            )
        out.append(
            ShapeSection(
                shape,
                load_text(one.levels, shape) or shape,
                policy_text(one),
                [t for t in tables if t is not None],
                refused,
            )
        )
    return out


def summary_surface(summaries: Mapping[str | None, Summary]) -> Surface | None:
    """The surface of a run summary split by shape (None for one shape)."""
    if len(summaries) <= 1:
        return None
    frames = {str(s): sm.best for s, sm in summaries.items() if not sm.best.empty}
    first = next(iter(summaries.values()))
    return surface_grid(surface_table(frames), list(frames), baseline_name(first.levels))
