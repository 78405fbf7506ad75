"""The first answer from a run: throughput per variant and level, best per level.

A view of the same analysis the report and the artifacts use (analysis/levels.py):
the same variant order, and on a fleet the same one target per variant, so the CLI
summary and the report can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from specsweep.analysis.levels import answer_rows, best_per_level, metric_table

BEST_COLUMNS = ["concurrency", "best_variant", "best_throughput", "baseline_throughput", "speedup"]


@dataclass(frozen=True)
class Summary:
    throughput: pd.DataFrame  # index concurrency, one column per variant (baseline first)
    best: pd.DataFrame  # concurrency, best_variant, best_throughput, baseline, speedup
    failed_levels: pd.DataFrame  # variant, concurrency, error


def summarize(levels: pd.DataFrame) -> Summary:
    """Only levels with status ok enter the comparison; failed ones are listed apart."""
    rows = answer_rows(levels)
    failed = rows.loc[rows["status"] != "ok", ["variant", "concurrency", "error"]]
    throughput = metric_table(levels, "output_throughput")
    if throughput.empty:
        empty = pd.DataFrame()
        return Summary(empty, empty, failed.reset_index(drop=True))
    best = best_per_level(levels)
    best = best[[c for c in BEST_COLUMNS if c in best.columns]]
    return Summary(throughput, best.reset_index(drop=True), failed.reset_index(drop=True))
