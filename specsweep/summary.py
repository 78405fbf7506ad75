"""The first answer from a run: throughput per variant and level, best per level."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Summary:
    throughput: pd.DataFrame  # index concurrency, one column per variant (baseline first)
    best: pd.DataFrame  # concurrency, best_variant, best_throughput, baseline, speedup
    failed_levels: pd.DataFrame  # variant, concurrency, error


def _variant_order(levels: pd.DataFrame) -> list[str]:
    firsts = levels.sort_values(["is_baseline", "started_at"], ascending=[False, True])
    return list(dict.fromkeys(firsts["variant"]))


def summarize(levels: pd.DataFrame) -> Summary:
    """Only levels with status ok enter the comparison; failed ones are listed apart."""
    ok = levels[levels["status"] == "ok"]
    failed = levels.loc[levels["status"] != "ok", ["variant", "concurrency", "error"]]
    if ok.empty:
        empty = pd.DataFrame()
        return Summary(empty, empty, failed.reset_index(drop=True))
    table = ok.pivot_table(
        index="concurrency", columns="variant", values="output_throughput", aggfunc="mean"
    )
    table = table[[v for v in _variant_order(ok) if v in table.columns]]
    baseline_names = ok.loc[ok["is_baseline"], "variant"].unique()
    baseline = table[baseline_names[0]] if len(baseline_names) else None
    best_variant = table.idxmax(axis=1)
    best = pd.DataFrame(
        {
            "concurrency": table.index,
            "best_variant": best_variant.values,
            "best_throughput": table.max(axis=1).values,
        }
    )
    if baseline is not None:
        best["baseline_throughput"] = baseline.values
        best["speedup"] = best["best_throughput"] / best["baseline_throughput"]
    return Summary(table, best.reset_index(drop=True), failed.reset_index(drop=True))
