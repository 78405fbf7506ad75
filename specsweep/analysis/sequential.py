"""Measure more while the server is up: the next step that could settle an open decision.

A level the tie rule leaves open (tie_rule.py: a more complex config measured beyond the
tie margin over the simpler choice, its interval reaching below the margin) changes the
deployable config depending on which way more measurement goes. The cheapest time to
measure more is while that variant's server is still up: relaunching it later costs a
whole launch. So after a variant's levels, `plan_more` looks at the run's rows so far
and returns a typed step, as a planner should (GuideLLM's ``Profile.next_strategy``):

- `MeasureMore(concurrency, passes)`: more passes of this variant at a level where it is
  one side of an open decision and its own interval is a large part of the ratio's (else
  measuring it would not narrow the ratio), the widest first, doubling its passes; or
- `Settled(reason)`: nothing open involves it, or the run's budget (the server time spent
  measuring more, over the whole run: `load.decide_budget_s` plus `decide_launch_share` of
  the launches so far, VariantServer.decide_budget_s) would be exceeded.

Where nothing is open yet, a variant whose pivot the intervals cannot place (its ratio to
the baseline holds 1 beyond the tie margin at a level measured on this launch, pivot.py)
gets more passes there, where its own interval is at least half as wide as the baseline's.
A pivot names no config, so this spends from `PRECISION_SHARE` (below), before the
incumbent's precision.

Where nothing is open yet, a variant may still be measured more for precision: the
baseline (the reference of every ratio) and the current choice of a level (the incumbent
that later variants are compared with after its server is gone). That spending is
foresight, not a decision, so it may use only `PRECISION_SHARE` of the budget: the rest
stays for decisions that are open, which the last variants launched (their servers come
up last) would otherwise find spent.

Extra passes are pooled with the level's earlier ones (same server, fresh prompts), so the
level's interval narrows and the level row is rewritten with every pass in it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from specsweep.analysis.levels import adaptive_mask, judge_levels, ok_levels
from specsweep.analysis.params import TIE_MARGIN
from specsweep.analysis.pivot import pivot_points

MAX_PASSES = 16  # a level pooled past this is left to the budget's verdict: it is a tie
PRECISION_SHARE = 0.5  # of the budget, the most spent where no decision is open (above)


@dataclass(frozen=True)
class MeasureMore:
    concurrency: int
    passes: int  # further passes to run now
    reason: str  # the open decision it would settle


@dataclass(frozen=True)
class Settled:
    reason: str


DecideStep = MeasureMore | Settled


def _rel_half(row: pd.Series) -> float:
    value, lo, hi = (
        row["output_throughput"],
        row.get("output_throughput_lo"),
        row.get("output_throughput_hi"),
    )
    if value is None or lo is None or hi is None or pd.isna(lo) or pd.isna(hi) or not value:
        return math.nan
    return float((hi - lo) / 2.0 / value)


def plan_more(
    rows: pd.DataFrame,
    variant: str,
    *,
    passes: Mapping[int, int],
    pass_seconds: Mapping[int, float],
    spent_s: float,
    budget_s: float,
    margin: float = TIE_MARGIN,
) -> DecideStep:
    """The next extra measurement of `variant` (see the module docstring).

    rows: the run's level rows of this cell (one shape, the answer's targets);
    passes / pass_seconds: per level this server can pool into (measured on it now), its
    passes so far and the seconds one pass took; spent_s: the run's extra seconds so far.
    """
    if budget_s <= 0:
        return Settled("measuring more is off (load.decide_budget_s = 0)")
    left = budget_s - spent_s
    foresight = PRECISION_SHARE * budget_s - spent_s  # what precision alone may spend
    ok = ok_levels(rows)
    ok = ok[~adaptive_mask(ok)]
    if ok.empty:
        return Settled("nothing measured")
    judged = judge_levels(ok, margin)
    mine = ok[ok["variant"] == variant].groupby("concurrency").last()
    if bool(ok.loc[ok["variant"] == variant, "is_baseline"].any()):
        return _reference(mine, passes, pass_seconds, foresight, spent_s, budget_s, margin)
    candidates = []
    for c, j in judged.items():
        if j.status != "open" or variant not in (j.choice, j.rival) or c not in passes:
            continue
        if c not in mine.index or passes[c] >= MAX_PASSES:
            continue
        other = j.rival if variant == j.choice else j.choice
        theirs = ok[(ok["variant"] == other) & (ok["concurrency"] == c)]
        own, their = _rel_half(mine.loc[c]), _rel_half(theirs.iloc[-1]) if len(theirs) else 0.0
        if _other_side_dominates(own, their):
            continue
        candidates.append((j.width(), c, j))
    if not candidates and (unsure := _unsure_pivot(ok, variant, mine, passes)) is not None:
        half, c = unsure
        return _more(c, passes, pass_seconds, foresight, spent_s, budget_s,
                     f"{variant}'s pivot is unplaced: its ratio to the baseline holds 1 in "
                     f"its 95% interval at c={c}, its side measured ±{half:.1%}",
                     "its share for pivots and precision")  # fmt: skip
    if not candidates:
        # the incumbent: where this variant is the choice, later variants are compared
        # with it after its server is gone; make it as sure as the reference
        wide = {
            c: half
            for c, j in judged.items()
            if j.choice == variant and c in passes and c in mine.index and passes[c] < MAX_PASSES
            and math.isfinite(half := _rel_half(mine.loc[c])) and half > 2 * margin
        }  # fmt: skip
        if wide:
            c = _cheapest_to_settle(wide, passes, pass_seconds, 2 * margin)
            return _more(c, passes, pass_seconds, foresight, spent_s, budget_s,
                         f"{variant} is the choice at c={c}, measured ±{wide[c]:.1%}",
                         "its share for precision")  # fmt: skip
    if not candidates:
        return Settled(f"no open decision that more of {variant} can settle")
    _, c, j = max(candidates, key=lambda t: (t[0] if math.isfinite(t[0]) else 0.0, -t[1]))
    return _more(c, passes, pass_seconds, left, spent_s, budget_s, j.sentence())


def _other_side_dominates(own: float, theirs: float) -> bool:
    """Whether the other side's interval is over twice this side's: more passes of this
    side then barely narrow the ratio (its half-widths add in quadrature)."""
    return math.isfinite(own) and math.isfinite(theirs) and own < 0.5 * theirs


def _unsure_pivot(
    ok: pd.DataFrame, variant: str, mine: pd.DataFrame, passes: Mapping[int, int]
) -> tuple[float, int] | None:
    """An inconclusive pivot of this variant that more of its own passes can place: the
    widest of its unsure levels (the ratio's interval contains 1) measured on this launch
    whose own interval is at least half the baseline's there (the baseline's server is
    gone: where its noise dominates, measuring this side barely narrows the ratio)."""
    pivot = pivot_points(ok).get(variant)
    if pivot is None or pivot.kind != "inconclusive":
        return None
    base = ok[ok["is_baseline"].astype(bool)].groupby("concurrency").last()
    unsure = []
    for c in pivot.unsure:
        if c not in passes or c not in mine.index or passes[c] >= MAX_PASSES:
            continue
        own = _rel_half(mine.loc[c])
        theirs = _rel_half(base.loc[c]) if c in base.index else 0.0
        if not math.isfinite(own) or _other_side_dominates(own, theirs):
            continue
        unsure.append((own, c))
    if not unsure:
        return None
    return max(unsure)


def _cheapest_to_settle(
    wide: Mapping[int, float],
    passes: Mapping[int, int],
    pass_seconds: Mapping[int, float],
    target: float,
) -> int:
    """Of the levels measured wider than ``target`` (relative half-width by concurrency),
    the one that more passes bring within it for the fewest seconds; where none can within
    MAX_PASSES, the widest. An interval narrows about as 1/sqrt(passes), so a level needs
    about passes x (half / target)^2 in all. Widest-first spent a run's whole precision
    share on a noisy c=16 (16 passes, still ±2.5%) while c=1, a pass or two from ±2%, kept
    ±3.9% (tests/flows/test_decision_flow.py on a loaded 2-core machine)."""

    def key(c: int) -> tuple[bool, float, float]:
        n, half = passes[c], wide[c]
        need = math.ceil(n * (half / target) ** 2)
        seconds = (need - n) * pass_seconds.get(c, math.inf)
        return (need > MAX_PASSES, seconds if need <= MAX_PASSES else 0.0, -half)

    return min(wide, key=key)


def _more(
    c: int,
    passes: Mapping[int, int],
    pass_seconds: Mapping[int, float],
    left: float,
    spent_s: float,
    budget_s: float,
    reason: str,
    share: str = "",
) -> DecideStep:
    """Double the level's passes, or as many as the budget left allows (at least one)."""
    more = min(max(1, passes[c]), MAX_PASSES - passes[c])
    cost = pass_seconds.get(c, math.inf)
    while more > 1 and more * cost > left:
        more //= 2
    if more * cost > left:
        spent = f"{spent_s:.0f} of {budget_s:.0f} s" + (f", {share}" if share else "")
        return Settled(
            f"the measure-more budget is spent ({spent}; load.decide_budget_s and "
            f"decide_launch_share of the launches): c={c} stays as is"
        )
    return MeasureMore(c, more, reason)


def _reference(
    mine: pd.DataFrame,
    passes: Mapping[int, int],
    pass_seconds: Mapping[int, float],
    left: float,
    spent_s: float,
    budget_s: float,
    margin: float,
) -> DecideStep:
    """The baseline is one side of every speedup, pivot and tie the run will judge, and its
    server is gone by the time the others are measured: while it is up, its levels get more
    passes until each is within twice the tie margin (or the budget says no), the one
    cheapest to bring there first (`_cheapest_to_settle`)."""
    wide = {
        int(c): half
        for c, row in mine.iterrows()
        if int(c) in passes
        and passes[int(c)] < MAX_PASSES
        and math.isfinite(half := _rel_half(row))
        and half > 2 * margin
    }
    if not wide:
        return Settled(f"every level within ±{2 * margin:.0%} (the reference of every ratio)")
    c = _cheapest_to_settle(wide, passes, pass_seconds, 2 * margin)
    reason = f"the reference of every ratio measured ±{wide[c]:.1%} at c={c}"
    return _more(c, passes, pass_seconds, left, spent_s, budget_s, reason,
                 "its share for precision")  # fmt: skip
