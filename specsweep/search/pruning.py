"""Which levels of a variant cannot matter: the level-skip rule of an adaptive search.

Speculation pays at low concurrency and costs at high concurrency (the verify's extra
tokens and the draft forwards grow with the batch while the accepted tokens do not), so a
variant that already trails the best and the baseline, and trails further at each level,
will not become the best at a higher one. Once it trails both by more than the margin
(the whole 95% interval of the ratio below 1 - margin) at two consecutive measured levels
and the ratio fell between them, its higher levels are skipped: recorded as `skipped` with
this reason, never given a number. A confirmation level at the top can be forced.
"""

from __future__ import annotations

import math

import pandas as pd

from specsweep.results.intervals import Interval, ratio


def _throughput(row: pd.Series) -> Interval:
    lo, hi = row.get("output_throughput_lo"), row.get("output_throughput_hi")
    known = lo is not None and hi is not None and not (pd.isna(lo) or pd.isna(hi))
    value = float(row["output_throughput"])
    return Interval(value, float(lo), float(hi)) if known else Interval(value)


def _upper(x: Interval) -> float:
    """The ratio's upper bound; its value where no interval is known."""
    return x.hi if x.known else x.value


def _trail(ok: pd.DataFrame, variant: str, c: int) -> tuple[Interval, str, Interval] | None:
    """The variant's ratio to the best other variant measured at c, that best's name, and
    its ratio to the baseline; None when c lacks either."""
    here = ok[ok["concurrency"] == c]
    mine = here[here["variant"] == variant]
    others = here[here["variant"] != variant]
    base = others[others["is_baseline"].astype(bool)]
    if mine.empty or others.empty or base.empty:
        return None
    best = others.loc[others["output_throughput"].idxmax()]
    me = _throughput(mine.iloc[0])
    return ratio(me, _throughput(best)), str(best["variant"]), ratio(me, _throughput(base.iloc[0]))


def skip_reason(
    levels: pd.DataFrame, variant: str, concurrency: int, all_levels: list[int], margin: float
) -> str | None:
    """Why `variant` need not be measured at `concurrency` (None: measure it).

    `levels`: the run's level rows on the variant's target. Looks at the last two of the
    sweep's levels below `concurrency`; both must be measured (status ok) for this variant.
    """
    if levels.empty:
        return None
    mine = levels[(levels["variant"] == variant) & (levels["concurrency"] < concurrency)]
    earlier = mine[mine["status"] == "skipped"].sort_values("concurrency")
    if not earlier.empty:  # a resumed variant: the rule already fired at a lower level
        return str(earlier["error"].iloc[0])
    below = [c for c in sorted(all_levels) if c < concurrency][-2:]
    if len(below) < 2:
        return None
    ok = levels[levels["status"] == "ok"]
    trails = [_trail(ok, variant, c) for c in below]
    if any(t is None for t in trails):
        return None
    (r1, best1, b1), (r2, best2, b2) = trails  # type: ignore[misc]
    limit = 1.0 - margin
    behind = all(_upper(x) < limit for x in (r1, b1, r2, b2))
    falling = math.isfinite(r1.value) and math.isfinite(r2.value) and r2.value < r1.value
    if not (behind and falling):
        return None
    c1, c2 = below

    def gap(x: Interval) -> str:
        return f"{1 - x.value:.0%}"

    return (
        f"skipped from c={concurrency} up: trailed the best ({best1} at c={c1}, {best2} "
        f"at c={c2}) by {gap(r1)} and {gap(r2)}, the baseline by {gap(b1)} and {gap(b2)} "
        f"(95% upper bounds under {limit:g}x), falling; assumed to keep falling above"
    )
