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

With the levels' 95% intervals, each level is *above* (the ratio's interval is over
1), *below* (under 1), *level* with the baseline (it contains 1 but lies within the tie
margin of it: tie_rule.py, the one rule every view decides with) or *unsure* (it contains
1 and reaches beyond the margin). A crossing gets an interval, the crossing of the two
lower bounds and of the two upper bounds (raising both ratios moves the crossing up),
when its two levels settle it: speculation does not lose beyond the margin below it (the
lower bound at least 1 / (1 + margin)) and does not pay beyond it above (the upper bound
at most 1 + margin); where it may gain at most the margin, it does not pay, whichever way
the rest of its interval goes. `never` / `always` need every level sure or level;
otherwise the pivot is `inconclusive` between the last sure-above and the first
sure-below level around the unsure ones, with the level to add there.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from specsweep.analysis.levels import baseline_name, cell, interval_tables, metric_table
from specsweep.analysis.params import TIE_MARGIN
from specsweep.results.intervals import ratio

PivotKind = Literal["crosses", "never", "always", "below_at_low", "inconclusive"]


@dataclass(frozen=True)
class Pivot:
    """Where one speculative variant falls below the baseline.

    kind:
      crosses       faster than the baseline at low concurrency, slower above `concurrency`
      never         never slower than the baseline in the measured range
      always        slower than the baseline at every measured level
      below_at_low  slower at low concurrency, faster above (no downward crossing)
      inconclusive  the intervals cannot place it: between c=low and c=high (None: below
                    the lowest / above the highest measured level); add `suggest` there
    """

    variant: str
    kind: PivotKind
    concurrency: float | None  # the interpolated pivot when kind == "crosses"
    levels: tuple[int, ...]  # the levels compared (both measured ok)
    crossings: tuple[tuple[float, str], ...] = field(default=())  # (concurrency, "down"/"up")
    low: float | None = None  # crosses: the pivot's 95% range; inconclusive: the bracket
    high: float | None = None
    unsure: tuple[int, ...] = ()  # levels whose ratio's interval holds 1, beyond the margin
    suggest: int | None = None  # inconclusive: the level to measure next
    intervals: bool = False  # whether the levels had intervals (schema 3)
    level: tuple[int, ...] = ()  # levels whose ratio's interval lies within the tie margin of 1
    margin: float = TIE_MARGIN

    @property
    def multiple_crossings(self) -> bool:
        return len(self.crossings) > 1

    @property
    def soft(self) -> bool:
        """Inconclusive, or a crossing whose range spans more than a factor 1.25 in c."""
        if self.kind == "inconclusive":
            return True
        if self.kind != "crosses" or self.low is None or self.high is None:
            return False
        return self.high > 1.25 * self.low

    def range_text(self) -> str:
        if self.low is None or self.high is None:
            return ""
        return f"c≈{self.low:.3g} to {self.high:.3g}"

    def describe(self) -> str:
        lo, hi = (self.levels[0], self.levels[-1]) if self.levels else (None, None)
        if self.kind == "inconclusive":
            if self.low is not None and self.high is not None:
                where = f"between c={self.low:g} and c={self.high:g}"
            elif self.high is not None:
                where = f"at or below c={self.high:g}"
            elif self.low is not None:
                where = f"from c={self.low:g} up to the highest measured c={hi}"
            else:
                where = f"over the whole measured range (c={lo}..{hi})"
            unsure = ", ".join(map(str, self.unsure))
            text = f"crosses {where}: the ratio's 95% interval contains 1 at c={unsure}"
            if self.suggest is not None:
                text += f"; add a level at c={self.suggest} (or repeat c={unsure})"
            else:
                text += "; measure the levels longer (load.target_ci) to tell"
            return text
        if self.kind == "crosses":
            text = f"pivot at c≈{self.concurrency:.3g}"
            if self.low is not None and self.high is not None:
                text += f" (95%: {self.range_text()})"
            if self.multiple_crossings:
                marks = ", ".join(f"{d} at c≈{c:.3g}" for c, d in self.crossings)
                text += f" (crosses the baseline {len(self.crossings)} times: {marks})"
            return text + self._level_text()
        if self.kind == "never":
            if self.level:
                return (
                    f"never: faster than the baseline at every measured level (c={lo}..{hi})"
                    f" or level with it{self._level_text()}"
                )
            return f"never: faster than the baseline at every measured level (c={lo}..{hi})"
        if self.kind == "always":
            if self.level:
                return (
                    f"always: slower than the baseline at every measured level (c={lo}..{hi})"
                    f" or level with it{self._level_text()}"
                )
            return f"always: slower than the baseline at every measured level (c={lo}..{hi})"
        up = ", ".join(f"c≈{c:.3g}" for c, _ in self.crossings)
        return f"slower than the baseline at low concurrency, faster from {up}"

    def _level_text(self) -> str:
        """Where the ratio's whole interval lies within the tie margin of 1."""
        if not self.level:
            return ""
        at = ", ".join(f"c={c}" for c in self.level)
        return f"; level with the baseline within {self.margin:.0%} at {at}"


def _crossing(c0: int, c1: int, r0: float, r1: float) -> float:
    """Where the line through (log2 c0, r0), (log2 c1, r1) meets r = 1."""
    x0, x1 = math.log2(c0), math.log2(c1)
    if r1 == r0:
        return float(c0)
    return float(2 ** (x0 + (1.0 - r0) * (x1 - x0) / (r1 - r0)))


def _sides(ratio: pd.Series, lo: pd.Series, hi: pd.Series, margin: float) -> dict[int, str]:
    """Per level: "above", "below", "level" (the ratio's interval contains 1 and lies within
    the tie margin of it) or "unsure" (it contains 1 and reaches beyond the margin)."""
    out = {}
    for c, r in ratio.items():
        low, high = lo.get(c, math.nan), hi.get(c, math.nan)
        if math.isnan(low) or math.isnan(high):
            out[int(c)] = "above" if r >= 1.0 else "below"
        elif low >= 1.0:
            out[int(c)] = "above"
        elif high < 1.0:
            out[int(c)] = "below"
        elif low >= 1.0 / (1.0 + margin) and high <= 1.0 + margin:
            out[int(c)] = "level"
        else:
            out[int(c)] = "unsure"
    return out


def _settles(c0: int, c1: int, lo: pd.Series, hi: pd.Series, margin: float) -> bool:
    """Whether a downward crossing's two levels place it: below it speculation loses no
    more than the margin (c0's lower bound), above it it gains no more (c1's upper bound),
    so no level outside the bracket is where speculation stops paying. Without intervals
    the point ratios alone place it."""
    low, high = float(lo.get(c0, math.nan)), float(hi.get(c1, math.nan))
    if math.isnan(low) or math.isnan(high):
        return True
    return low >= 1.0 / (1.0 + margin) and high <= 1.0 + margin


def _inconclusive(
    variant: str, levels: tuple[int, ...], sides: dict[int, str], crossings, margin: float
) -> Pivot:
    """The bracket around the unsure levels: the last sure-above level before the first
    unsure one, the first sure-below level after the last unsure one."""
    unsure = [c for c in levels if sides[c] == "unsure"]
    above = [c for c in levels if sides[c] == "above" and c < unsure[0]]
    below = [c for c in levels if sides[c] == "below" and c > unsure[-1]]
    low = float(above[-1]) if above else None
    high = float(below[0]) if below else None
    # the geometric middle of the gap where the ratio itself crosses 1, else of the widest
    # gap around the unsure levels (or twice the top level when none is sure below)
    # (only a level not measured yet: between c=1 and c=2 there is none, repeat them instead)
    points = sorted({*(c for c in (low, high) if c is not None), *map(float, unsure)})
    gaps = [(b / a, m) for a, b in itertools.pairwise(points) if (m := _inside(a, b, levels))]
    downs = [m for a, b in gaps_of(levels, crossings) if (m := _inside(a, b, levels))]
    suggest = None
    if downs:
        suggest = downs[0]
    elif low is None and high is None:
        suggest = None  # unsure everywhere: no level placed anywhere would settle it
    elif high is None:
        suggest = int(2 * levels[-1])
    elif gaps:
        suggest = max(gaps)[1]
    level = tuple(c for c in levels if sides[c] == "level")
    return Pivot(
        variant, "inconclusive", None, levels, tuple(crossings), low, high, tuple(unsure),
        suggest, True, level, margin,
    )  # fmt: skip


def _inside(a: float, b: float, measured: tuple[int, ...]) -> int | None:
    """The level to add between two measured ones: the geometric middle, rounded, when
    the gap is wider than a factor 1.5 and that level is not measured already."""
    if b / a <= 1.5:
        return None
    middle = round(math.sqrt(a * b))
    return middle if a < middle < b and middle not in measured else None


def gaps_of(levels: tuple[int, ...], crossings) -> list[tuple[float, float]]:
    """The measured levels around each downward crossing."""
    out = []
    for c, direction in crossings:
        if direction != "down":
            continue
        below = [x for x in levels if x <= c]
        above = [x for x in levels if x >= c]
        if below and above:
            out.append((float(below[-1]), float(above[0])))
    return out


def pivot_for(
    ratio: pd.Series,
    variant: str,
    lo: pd.Series | None = None,
    hi: pd.Series | None = None,
    margin: float = TIE_MARGIN,
) -> Pivot:
    """Pivot of one variant from its throughput ratio to the baseline, indexed by concurrency,
    with the ratio's 95% interval when the levels have one (lo, hi); `margin`: the tie
    rule's (tie_rule.py)."""
    ratio = ratio.dropna().sort_index()
    levels = tuple(int(c) for c in ratio.index)
    if ratio.empty:
        return Pivot(variant, "never", None, levels)
    lo = lo.reindex(ratio.index) if lo is not None else pd.Series(math.nan, index=ratio.index)
    hi = hi.reindex(ratio.index) if hi is not None else pd.Series(math.nan, index=ratio.index)
    known = bool(lo.notna().all() and hi.notna().all())
    sides = _sides(ratio, lo, hi, margin)
    level = tuple(c for c in levels if sides[c] == "level")
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
        c0, c1 = _bracket(ratio, downs[0])
        if not _settles(c0, c1, lo, hi, margin):
            return _inconclusive(variant, levels, sides, crossings, margin)
        low = high = None
        if known:
            low = _crossing(c0, c1, float(lo[c0]), float(lo[c1]))
            high = _crossing(c0, c1, float(hi[c0]), float(hi[c1]))
            low, high = max(min(low, high), c0), min(max(low, high), c1)
        return Pivot(
            variant, "crosses", downs[0], levels, tuple(crossings), low, high,
            tuple(c for c in levels if sides[c] == "unsure"), None, known, level, margin,
        )  # fmt: skip
    if any(s == "unsure" for s in sides.values()):
        return _inconclusive(variant, levels, sides, crossings, margin)
    if (ratio >= 1.0).all():
        return Pivot(variant, "never", None, levels, intervals=known, level=level, margin=margin)
    if (ratio < 1.0).all():
        return Pivot(variant, "always", None, levels, intervals=known, level=level, margin=margin)
    return Pivot(
        variant, "below_at_low", None, levels, tuple(crossings), intervals=known, level=level,
        margin=margin,
    )  # fmt: skip


def _bracket(ratio: pd.Series, crossing: float) -> tuple[int, int]:
    """The measured levels on either side of an interpolated crossing."""
    cs = [int(c) for c in ratio.index]
    for c0, c1 in itertools.pairwise(cs):
        if c0 <= crossing <= c1 and ratio[c0] >= 1.0 > ratio[c1]:
            return c0, c1
    raise AssertionError(f"no bracket for the crossing at c={crossing}")


def throughput_ratios(levels: pd.DataFrame) -> pd.DataFrame:
    """Index concurrency, one column per speculative variant: its throughput / the baseline's."""
    return ratio_intervals(levels)[0]


def ratio_intervals(levels: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(ratio, lo, hi): each speculative variant's throughput / the baseline's per level,
    with its 95% interval (NaN where the levels have none)."""
    table = metric_table(levels, "output_throughput")
    base = baseline_name(levels)
    if table.empty or base is None or base not in table.columns:
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    lo, hi = interval_tables(levels, "output_throughput")
    spec = [v for v in table.columns if v != base]
    out = [pd.DataFrame(np.nan, index=table.index, columns=spec) for _ in range(3)]
    for v in spec:
        for c in table.index:
            r = ratio(cell(table, lo, hi, c, v), cell(table, lo, hi, c, base))
            out[0].at[c, v], out[1].at[c, v], out[2].at[c, v] = r.value, r.lo, r.hi
    return out[0], out[1], out[2]


def pivot_points(levels: pd.DataFrame) -> dict[str, Pivot]:
    """Pivot of every speculative variant of a run (empty without a measured baseline)."""
    ratios, lo, hi = ratio_intervals(levels)
    return {str(v): pivot_for(ratios[v], str(v), lo[v], hi[v]) for v in ratios.columns}
