"""Several hosts in one run: which rows the answer used, and how the hosts compare.

On a fleet a run can measure the same (variant, concurrency) on several
targets: a variant is re-run elsewhere when its host dies, or a sweep is
spread on purpose. The answer takes each variant's curve from one target
(`levels.chosen_targets`); this module shows everything else:

- `compare_hosts`: per (variant, concurrency) measured ok on two targets or
  more, each target's throughput and latency and its ratio to the fastest
  target of that cell; per target, its GPU identity, what it measured and the
  median of those ratios, flagged when it is slower than the noise allows;
- `gpu_kind_warning`: a sentence when the variants of the answer were
  measured on different GPU kinds, so their ranking compares GPUs too.

Noise is the repeats' spread, as in compare.py: a target's mean throughput at
a level has relative standard error cv / sqrt(n); a ratio's noise combines
both sides. A target is "slower" when its median shortfall exceeds `z` times
the median noise of its cells, or, when no level was repeated, exceeds
`min_difference` (5%). See docs/analysis.md, "Several hosts".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specsweep.analysis.baselines import gpu_kind
from specsweep.analysis.compare import mean_noise
from specsweep.analysis.levels import chosen_targets, variant_order

IDENTITY_COLUMNS = ["gpu_host", "gpu_name", "gpu_count", "driver_version", "gpu_uuids"]
GPU_KIND_COLUMNS = ["gpu_name", "gpu_count", "driver_version"]
CELL_METRICS = ["output_throughput", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50"]
MIN_DIFFERENCE = 0.05  # relative shortfall that counts when no level was repeated

FASTEST, SLOWER, WITHIN = "fastest", "slower", "within noise"
NO_SHARED = "no shared levels"


@dataclass(frozen=True)
class HostComparison:
    """The targets of one run side by side. Every frame is plain pandas.

    hosts: one row per target: target, the IDENTITY_COLUMNS, ok_levels,
      failed_levels, in_answer (the variants whose curve comes from it),
      shared_cells, median_ratio (its throughput / the fastest target's,
      median over the shared cells), threshold (the shortfall it must exceed
      to be called slower), basis ('repeats' or 'minimum difference'),
      slower (bool) and verdict ('fastest', 'slower', 'within noise' or
      'no shared levels').
    cells: one row per (variant, concurrency, target) for the cells measured
      ok on two targets or more: CELL_METRICS, ratio (to the cell's fastest),
      noise (relative SE of that ratio; NaN unknown), in_answer, verdict.
    left_out: per (variant, target) whose rows the answer did not use: ok and
      failed levels there, and the target used instead.
    """

    hosts: pd.DataFrame
    cells: pd.DataFrame
    left_out: pd.DataFrame
    z: float
    min_difference: float

    @property
    def slower(self) -> list[str]:
        return [str(t) for t in self.hosts.loc[self.hosts["slower"], "target"]]

    def line(self, within: bool = False) -> str:
        """One paragraph for the answer: the targets, what each gave, and who is slower.
        `within`: a baseline plan divided each host's variants by a comparable baseline, so
        a slower host does not make the speedups compare hosts."""
        parts = []
        for rec in self.hosts.to_dict("records"):
            used = f"{rec['in_answer']} in the answer" if rec["in_answer"] else "not in the answer"
            parts.append(f"{rec['target']} ({used})")
        text = f"Measured on {len(self.hosts)} targets: " + ", ".join(parts) + "."
        shared = len(self.cells[["variant", "concurrency"]].drop_duplicates())
        if not shared:
            return text + " No level was measured ok on two of them, so they cannot be compared."
        text += f" {shared} level{'s' if shared > 1 else ''} measured on several targets: "
        slow = self.hosts[self.hosts["slower"]]
        if slow.empty:
            return text + "no target is slower than the noise allows."
        text += "; ".join(
            f"{r['target']} is {1 - r['median_ratio']:.1%} slower than the fastest"
            f" (median over {r['shared_cells']} shared levels, threshold {r['threshold']:.1%})"
            for r in slow.to_dict("records")
        )
        sources = (self.hosts["in_answer"] != "").sum()
        slow_sources = [r["target"] for r in slow.to_dict("records") if r["in_answer"]]
        if sources > 1 and slow_sources and not within:
            text += (
                f". The answer's variants come from {sources} targets, "
                f"{', '.join(slow_sources)} among them: its speedups compare hosts too"
            )
        return text + "."


def _distinct(values: pd.Series) -> str | None:
    seen = sorted({str(v) for v in values.dropna()})
    return ", ".join(seen) if seen else None


def _per_level(levels: pd.DataFrame) -> pd.DataFrame:
    """Mean of each ok (variant, concurrency, target), with its throughput noise."""
    ok = levels[levels["status"] == "ok"]
    cols = [*CELL_METRICS, "output_throughput_cv", "repeats"]
    per = ok.groupby(["variant", "concurrency", "target"], as_index=False)[cols].mean()
    per["se"] = mean_noise(per["output_throughput_cv"], per["repeats"])
    return per


def _cells(
    per: pd.DataFrame, chosen: dict[str, str], order: list[str], z: float, floor: float
) -> pd.DataFrame:
    n = per.groupby(["variant", "concurrency"])["target"].transform("size")
    cells = per[n >= 2].copy()
    cols = ["variant", "concurrency", "target", *CELL_METRICS, "ratio", "noise", "in_answer"]
    if cells.empty:
        return pd.DataFrame(columns=[*cols, "verdict"])
    group = cells.groupby(["variant", "concurrency"])
    fastest = group["output_throughput"].transform("idxmax")
    cells["ratio"] = cells["output_throughput"] / group["output_throughput"].transform("max")
    se_f = cells.loc[fastest, "se"].to_numpy()
    se_t = cells["se"].to_numpy()
    # One side with repeats and one without: its noise stands for both, as in compare_runs.
    noise = np.hypot(np.where(np.isnan(se_t), se_f, se_t), np.where(np.isnan(se_f), se_t, se_f))
    is_fastest = cells.index.to_numpy() == fastest.to_numpy()
    cells["noise"] = np.where(is_fastest, np.nan, noise)
    pairs = zip(cells["variant"], cells["target"], strict=True)
    cells["in_answer"] = [chosen.get(v) == t for v, t in pairs]
    cells["verdict"] = [
        FASTEST if f else (SLOWER if 1 - r > _threshold(no, z, floor) else WITHIN)
        for f, r, no in zip(is_fastest, cells["ratio"], noise, strict=True)
    ]
    rank = {v: i for i, v in enumerate(order)}
    cells = cells.assign(_r=cells["variant"].map(rank)).sort_values(["_r", "concurrency", "target"])
    return cells[[*cols, "verdict"]].reset_index(drop=True)


def _threshold(noise: float, z: float, floor: float) -> float:
    return floor if math.isnan(noise) else z * noise


def compare_hosts(
    levels: pd.DataFrame, z: float = 2.0, min_difference: float = MIN_DIFFERENCE
) -> HostComparison | None:
    """The targets of one run's level rows side by side; None when the run has one target.

    `levels` are one run's rows as stored (all targets, failed levels too).
    """
    if "target" not in levels.columns or levels["target"].nunique() < 2:
        return None
    choice = chosen_targets(levels)
    chosen = dict(zip(choice["variant"], choice["target"], strict=True))
    order = variant_order(levels)
    cells = _cells(_per_level(levels), chosen, order, z, min_difference)
    rows = []
    for target, group in levels.groupby("target", sort=True):
        mine = cells[cells["target"] == target]
        # The noise of every comparison in its cells, also those where it is the fastest.
        keys = pd.MultiIndex.from_frame(mine[["variant", "concurrency"]])
        around = cells[pd.MultiIndex.from_frame(cells[["variant", "concurrency"]]).isin(keys)]
        known = around["noise"].dropna()
        threshold = z * float(known.median()) if len(known) else min_difference
        median = float(mine["ratio"].median()) if len(mine) else math.nan
        slower = bool(len(mine) and 1 - median > threshold)
        if not len(mine):
            verdict = NO_SHARED
        else:
            verdict = SLOWER if slower else (FASTEST if median >= 1.0 else WITHIN)
        ok = group["status"] == "ok"
        rows.append(
            {
                "target": target,
                **{c: _distinct(group[c]) for c in IDENTITY_COLUMNS if c in group.columns},
                "ok_levels": int(ok.sum()),
                "failed_levels": int((~ok & (group["status"] != "skipped")).sum()),
                "in_answer": ", ".join(v for v in order if chosen.get(v) == target),
                "shared_cells": len(mine),
                "median_ratio": median,
                "threshold": threshold,
                "basis": "repeats" if len(known) else "minimum difference",
                "slower": slower,
                "verdict": verdict,
            }
        )
    return HostComparison(
        hosts=pd.DataFrame(rows),
        cells=cells,
        left_out=_left_out(levels, chosen),
        z=z,
        min_difference=min_difference,
    )


def _left_out(levels: pd.DataFrame, chosen: dict[str, str]) -> pd.DataFrame:
    pairs = zip(levels["variant"], levels["target"], strict=True)
    rest = levels[[chosen.get(v) != t for v, t in pairs]]
    cols = ["variant", "target", "ok_levels", "failed_levels", "used_instead"]
    if rest.empty:
        return pd.DataFrame(columns=cols)
    out = (
        rest.assign(_ok=rest["status"] == "ok", _failed=~rest["status"].isin(["ok", "skipped"]))
        .groupby(["variant", "target"], as_index=False)
        .agg(ok_levels=("_ok", "sum"), failed_levels=("_failed", "sum"))
    )
    out["used_instead"] = out["variant"].map(chosen)
    return out[cols]


def _kind(rec: dict) -> str:
    """The GPU kind (baselines.gpu_kind, the one label) with its driver."""
    driver = rec.get("driver_version")
    driver = f", driver {driver}" if driver is not None and not pd.isna(driver) else ""
    return f"{gpu_kind(rec.get('gpu_name') or 'unknown GPU', rec.get('gpu_count'))}{driver}"


def gpu_kind_warning(levels: pd.DataFrame) -> str | None:
    """A warning when the variants' chosen targets differ in gpu_name, gpu_count or driver."""
    cols = [c for c in GPU_KIND_COLUMNS if c in levels.columns]
    if "target" not in levels.columns or not cols or levels["target"].nunique() < 2:
        return None
    choice = chosen_targets(levels)
    rows = levels.merge(choice[["variant", "target"]], on=["variant", "target"])
    kinds = rows.drop_duplicates(["variant", "target"])[["variant", "target", *cols]]
    kinds = kinds.assign(kind=[_kind(r) for r in kinds.to_dict("records")])
    if kinds["kind"].nunique() < 2:
        return None
    order = {v: i for i, v in enumerate(variant_order(levels))}
    groups = []
    for (kind, target), group in kinds.groupby(["kind", "target"], sort=False):
        names = sorted(group["variant"], key=lambda v: order.get(v, len(order)))
        groups.append((order.get(names[0], 0), f"{', '.join(names)} on {target} ({kind})"))
    detail = "; ".join(text for _, text in sorted(groups))
    return (
        f"variants were measured on different GPU kinds: {detail}; "
        "compare hosts before trusting the ranking"
    )
