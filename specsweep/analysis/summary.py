"""The first answer from a run: throughput per variant and level, best per level.

A view of the same analysis the report and the artifacts use (analysis/levels.py):
the same variant order, and on a fleet the same one target per variant, so the CLI
summary and the report can never disagree. It carries the same evidence: each level's
95% interval, the best's speedup interval, runner-up and lead, near-ties and the
simpler choice, and the pivots (with their range, or the bracket they are inconclusive in).
A search's skipped levels are listed apart from the failed ones, and its predictions
(`search`) never enter the tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from specsweep.analysis.answer import SearchView, failed_rows, search_view, skipped_rows
from specsweep.analysis.baselines import kind_frames
from specsweep.analysis.levels import answer_rows, best_per_level, interval_tables, metric_table
from specsweep.analysis.pivot import Pivot, pivot_points
from specsweep.analysis.shapes import shape_order, shape_rows

BEST_COLUMNS = [
    "concurrency",
    "best_variant",
    "best_throughput",
    "best_lo",
    "best_hi",
    "baseline_throughput",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "speedup_spread",
    "runner_up",
    "lead",
    "lead_lo",
    "lead_hi",
    "near_tie",
    "tied",
    "choice",
]


@dataclass(frozen=True)
class Summary:
    throughput: pd.DataFrame  # index concurrency, one column per variant (baseline first)
    best: pd.DataFrame  # BEST_COLUMNS of best_per_level (intervals NaN where unknown)
    failed_levels: pd.DataFrame  # variant, concurrency, error
    throughput_lo: pd.DataFrame = field(default_factory=pd.DataFrame)  # shaped like throughput
    throughput_hi: pd.DataFrame = field(default_factory=pd.DataFrame)
    pivots: dict[str, Pivot] = field(default_factory=dict)
    levels: pd.DataFrame = field(default_factory=pd.DataFrame)  # the answer's rows (target_ci)
    skipped_levels: pd.DataFrame = field(default_factory=pd.DataFrame)  # variant, c, reason
    search: SearchView | None = None  # None: the run had no search


def summarize(
    levels: pd.DataFrame,
    predictions: pd.DataFrame | None = None,
    search_stop: str | None = None,
    host_plans: pd.DataFrame | None = None,
    phases: Mapping[str, Mapping[str, float]] | None = None,
) -> Summary:
    """Only levels with status ok enter the comparison; failed ones are listed apart, and
    so are a search's skipped ones (not failures). `predictions`/`search_stop`: the run's
    search, shown apart (store.read_predictions, the runs row). `host_plans`: a fleet's
    baseline plan; the summary is then its first GPU kind's, as the answer's. `phases`:
    the run's phase records (store.read_phases), for a search's server time."""
    frames = kind_frames(levels, host_plans)
    stored = levels
    if frames:
        levels = next(iter(frames.values()))
    rows = answer_rows(levels)
    failed, skipped = failed_rows(rows), skipped_rows(rows)
    throughput = metric_table(levels, "output_throughput")
    if throughput.empty:
        empty = pd.DataFrame()
        view = search_view(rows, empty, predictions, search_stop, stored, phases)
        return Summary(
            empty,
            empty,
            failed,
            levels=rows,
            skipped_levels=skipped,
            search=view if view.present else None,
        )
    best = best_per_level(levels)
    view = search_view(rows, best, predictions, search_stop, stored, phases)
    best = best[[c for c in BEST_COLUMNS if c in best.columns]]
    lo, hi = interval_tables(levels, "output_throughput")
    return Summary(
        throughput,
        best.reset_index(drop=True),
        failed,
        lo,
        hi,
        pivot_points(levels),
        rows,
        skipped,
        view if view.present else None,
    )


def summaries_by_shape(
    summary: Summary, run: dict[str, Any] | None = None
) -> dict[str | None, Summary]:
    """A run summary split by load shape (one entry, keyed by its shape or None, when the
    rows hold one): each shape's throughput, best and pivots on its own cells, as
    `analyze` answers each shape. `run`: the runs row, whose config orders the shapes."""
    levels = summary.levels
    shapes = shape_order(levels, run) if not levels.empty else []
    if len(shapes) <= 1:
        return {shapes[0] if shapes else None: summary}
    search = summary.search
    preds = search.predictions if search is not None else None
    stop = search.stop if search is not None else None
    phases = search.phases if search is not None else None
    return {
        shape: summarize(
            levels[levels["shape"] == shape],
            shape_rows(preds, shape, first=i == 0),
            stop,
            phases=phases,
        )
        for i, shape in enumerate(shapes)
    }
