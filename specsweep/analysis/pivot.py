"""Pivot points: the concurrency above which a speculative variant stops paying.

The ratio r(c) = throughput(variant, c) / throughput(baseline, c) is taken at
the levels where both were measured. Between two adjacent levels where r
goes from >= 1 to < 1, the crossing is interpolated linearly in log2(c)
(levels are usually powers of two, and throughput curves are close to
linear in log2 c there). See docs/analysis.md.

Multiple crossings (a variant that loses at c=8, wins again at c=16 and
loses from c=32, typically noise near r = 1) are all listed; the pivot is
the *first* downward crossing, because above it speculation no longer pays
reliably, and `multiple_crossings` tells the reader to look at the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from specsweep.analysis.levels import baseline_name, metric_table

PivotKind = Literal["crosses", "never", "always", "below_at_low"]


@dataclass(frozen=True)
class Pivot:
    """Where one speculative variant falls below the baseline.

    kind:
      crosses       faster than the baseline at low concurrency, slower above `concurrency`
      never         never slower than the baseline in the measured range
      always        slower than the baseline at every measured level
      below_at_low  slower at low concurrency, faster above (no downward crossing)
    """

    variant: str
    kind: PivotKind
    concurrency: float | None  # the interpolated pivot when kind == "crosses"
    levels: tuple[int, ...]  # the levels compared (both measured ok)
    crossings: tuple[tuple[float, str], ...] = field(default=())  # (concurrency, "down"/"up")

    @property
    def multiple_crossings(self) -> bool:
        return len(self.crossings) > 1

    def describe(self) -> str:
        lo, hi = (self.levels[0], self.levels[-1]) if self.levels else (None, None)
        if self.kind == "crosses":
            text = f"pivot at c≈{self.concurrency:.3g}"
            if self.multiple_crossings:
                marks = ", ".join(f"{d} at c≈{c:.3g}" for c, d in self.crossings)
                text += f" (crosses the baseline {len(self.crossings)} times: {marks})"
            return text
        if self.kind == "never":
            return f"never: faster than the baseline at every measured level (c={lo}..{hi})"
        if self.kind == "always":
            return f"always: slower than the baseline at every measured level (c={lo}..{hi})"
        up = ", ".join(f"c≈{c:.3g}" for c, _ in self.crossings)
        return f"slower than the baseline at low concurrency, faster from {up}"


def _crossing(c0: int, c1: int, r0: float, r1: float) -> float:
    """Where the line through (log2 c0, r0), (log2 c1, r1) meets r = 1."""
    x0, x1 = math.log2(c0), math.log2(c1)
    if r1 == r0:
        return float(c0)
    return float(2 ** (x0 + (1.0 - r0) * (x1 - x0) / (r1 - r0)))


def pivot_for(ratio: pd.Series, variant: str) -> Pivot:
    """Pivot of one variant from its throughput ratio to the baseline, indexed by concurrency."""
    ratio = ratio.dropna().sort_index()
    levels = tuple(int(c) for c in ratio.index)
    if ratio.empty:
        return Pivot(variant, "never", None, levels)
    crossings: list[tuple[float, str]] = []
    pairs = zip(
        ratio.index[:-1], ratio.index[1:], ratio.to_numpy()[:-1], ratio.to_numpy()[1:], strict=True
    )
    for c0, c1, r0, r1 in pairs:
        if r0 >= 1.0 > r1:
            crossings.append((_crossing(c0, c1, r0, r1), "down"))
        elif r0 < 1.0 <= r1:
            crossings.append((_crossing(c0, c1, r0, r1), "up"))
    downs = [c for c, d in crossings if d == "down"]
    if downs:
        return Pivot(variant, "crosses", downs[0], levels, tuple(crossings))
    if (ratio >= 1.0).all():
        return Pivot(variant, "never", None, levels)
    if (ratio < 1.0).all():
        return Pivot(variant, "always", None, levels)
    return Pivot(variant, "below_at_low", None, levels, tuple(crossings))


def throughput_ratios(levels: pd.DataFrame) -> pd.DataFrame:
    """Index concurrency, one column per speculative variant: its throughput / the baseline's."""
    table = metric_table(levels, "output_throughput")
    base = baseline_name(levels)
    if table.empty or base is None or base not in table.columns:
        return pd.DataFrame()
    return table.drop(columns=[base]).div(table[base], axis=0)


def pivot_points(levels: pd.DataFrame) -> dict[str, Pivot]:
    """Pivot of every speculative variant of a run (empty without a measured baseline)."""
    ratios = throughput_ratios(levels)
    return {str(v): pivot_for(ratios[v], str(v)) for v in ratios.columns}
