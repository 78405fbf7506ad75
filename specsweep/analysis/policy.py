"""The speculation policy: "use variant X up to concurrency N, then no speculation".

X is a static variant: adaptive servers (sglang's tiers) are policies of their own and
are judged by the verification (adaptive_verify), not offered as X.

That is the rule dynamic speculation disable can apply (the seeds asked for it). It is
not chosen by its own tie rule: every level is decided by the one rule of
analysis/tie_rule.py (the same that decides the best-per-level table and the tier
export), and the policy puts those choices in the rule's shape (`rule_from_choices`):
speculation up to the highest level where it was chosen, with the variant chosen where
most of the traffic is. A clear gain at one level is never dropped because other levels
dilute it in a weighted total: the traffic mix weighs what the rule is worth (its
weighted throughput, `throughput`), not which levels speculate. The rule is compared
with always-baseline, with always running the best single speculative variant, and with
the per-level oracle (best variant at every level, the ceiling no single-threshold rule
can pass). `candidates` keeps the weighted score of every (X, N) for the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from specsweep.analysis.levels import (
    adaptive_mask,
    baseline_name,
    cell,
    interval_tables,
    judge_levels,
    metric_table,
    simplicity_key,
    slo_mask,
    throughput_spread,
)
from specsweep.analysis.params import TIE_MARGIN, LatencySLO, TrafficMix
from specsweep.analysis.pivot import Pivot, pivot_points
from specsweep.analysis.tie_rule import LevelJudgment, really_better
from specsweep.results.intervals import Interval, ratio


@dataclass(frozen=True)
class Policy:
    variant: str | None  # None: never speculate
    up_to: int | None  # the highest measured concurrency that runs `variant`
    next_level: int | None  # the first measured level that runs without speculation
    pivot: Pivot | None  # the chosen variant's pivot, to place the switch between levels
    weights: dict[int, float]  # the normalised traffic mix the scores use
    mix: TrafficMix
    slo: LatencySLO | None
    throughput: float  # weighted output throughput of this policy (tok/s)
    baseline_throughput: float
    best_single: str | None  # the best always-on speculative variant
    best_single_throughput: float
    oracle_throughput: float
    gain_spread: float  # relative spread of gain_vs_baseline from the repeats' CVs, NaN unknown
    candidates: pd.DataFrame  # variant, up_to, throughput: every rule considered
    baseline_misses_slo: tuple[int, ...] = ()  # levels where even no speculation misses the SLO
    gain_lo: float = math.nan  # 95% interval of gain_vs_baseline (NaN: levels without one)
    gain_hi: float = math.nan
    tie_note: str | None = None  # set when a near-tie was resolved to a simpler rule

    @property
    def gain_vs_baseline(self) -> float:
        return self.throughput / self.baseline_throughput - 1.0

    @property
    def gain_vs_best_single(self) -> float:
        return self.throughput / self.best_single_throughput - 1.0

    @property
    def share_of_oracle(self) -> float:
        return self.throughput / self.oracle_throughput

    def rule(self) -> str:
        """The rule alone, as an operator would configure it."""
        if self.variant is None:
            return "no speculation at any measured concurrency"
        if self.next_level is None:
            return f"use {self.variant} at every measured concurrency (up to {self.up_to})"
        rule = (
            f"use {self.variant} up to concurrency {self.up_to}, "
            f"then no speculation from c={self.next_level}"
        )
        crossing = self.switch_crossing()
        if crossing is not None:
            rule += f" (its throughput crosses the baseline's at c≈{crossing:.3g})"
        return rule

    def switch_crossing(self) -> float | None:
        """The interpolated crossing between the last level with and the first without speculation.

        Not simply the pivot: with several crossings (or a traffic mix that
        ignores low levels) the policy may switch at a later crossing.
        """
        if self.pivot is None or self.up_to is None or self.next_level is None:
            return None
        downs = [c for c, d in self.pivot.crossings if d == "down"]
        inside = [c for c in downs if self.up_to <= c <= self.next_level]
        return inside[0] if inside else None

    def line(self) -> str:
        """The rule with what it gains, in one paragraph."""
        gains = f"{self.gain_vs_baseline:+.1%}"
        if not math.isnan(self.gain_lo):
            gains += f" (95%: {self.gain_lo:+.1%} to {self.gain_hi:+.1%})"
        elif not math.isnan(self.gain_spread):
            gains += f" (±{self.gain_spread:.1%} across repeats)"
        gains += " output throughput vs always-baseline"
        if self.best_single is not None:
            gains += f", {self.gain_vs_best_single:+.1%} vs always {self.best_single}"
        text = f"{self.rule()[0].upper()}{self.rule()[1:]}: {gains}. Traffic {self.mix.describe()}"
        if self.slo is not None and self.slo.active:
            text += f"; SLO {self.slo.describe()}"
            if self.baseline_misses_slo:
                misses = ", ".join(map(str, self.baseline_misses_slo))
                text += f" (even the baseline misses it at c={misses})"
        text += "."
        if self.tie_note:
            text += f" {self.tie_note}"
        return text


def _weighted(values: pd.Series, weights: dict[int, float]) -> float:
    return float(sum(w * values[c] for c, w in weights.items() if w > 0))


def _weighted_spread(values: pd.Series, cvs: pd.Series, weights: dict[int, float]) -> float:
    """Relative spread of a weighted sum of independent levels, from their CVs."""
    used = [c for c, w in weights.items() if w > 0]
    if any(math.isnan(cvs.get(c, math.nan)) for c in used):
        return math.nan
    var = sum((weights[c] * values[c] * cvs[c]) ** 2 for c in used)
    return math.sqrt(var) / _weighted(values, weights)


def _series(table: pd.DataFrame, base: str, variant: str | None, up_to: int | None) -> pd.Series:
    """Per level, the variant a rule runs there."""
    if variant is None:
        return pd.Series(base, index=table.index)
    return pd.Series([variant if c <= up_to else base for c in table.index], index=table.index)


def _difference(
    a: pd.Series, b: pd.Series, table: pd.DataFrame, half: pd.DataFrame, weights: dict
) -> tuple[float, float]:
    """(weighted sum of a's levels - b's, its 95% half-width); NaN width when unknown."""
    diff, var = 0.0, 0.0
    for c, w in weights.items():
        if w <= 0 or a[c] == b[c]:
            continue
        diff += w * (table.at[c, a[c]] - table.at[c, b[c]])
        var += (w * half.at[c, a[c]]) ** 2 + (w * half.at[c, b[c]]) ** 2
    return diff, math.sqrt(var)


def rule_from_choices(
    judged: dict[int, LevelJudgment],
    table: pd.DataFrame,
    base: str,
    weights: dict[int, float],
    simplicity: dict[str, tuple],
    allowed: pd.DataFrame,
    cells: Callable[[int, str], Interval],
    margin: float,
) -> tuple[str | None, int | None, str | None]:
    """The static rule "X up to N, then no speculation" that the per-level choices ask for
    (the tie rule decides every level; this only puts the choices in the rule's shape).

    X: the speculative variant chosen where the most traffic is (ties: the simplest);
    N: the highest level where speculation was chosen and X, measured (and allowed) at
    every level up to it, is not really slower than the baseline there. Returns (X, N,
    a note where X runs at a level another config won), (None, None, None) when the
    baseline is chosen everywhere."""
    spec = {c: j.choice for c, j in judged.items() if j.choice != base}
    if not spec:
        return None, None, None
    share: dict[str, float] = {}
    for c, v in spec.items():
        share[v] = share.get(v, 0.0) + weights.get(c, 0.0) + 1e-9
    variant = min(share, key=lambda v: (-round(share[v], 9), simplicity.get(v, ())))
    up_to = None
    for c in (int(c) for c in table.index):
        if pd.isna(table.at[c, variant]) or not allowed.at[c, variant]:
            break  # X cannot run here, nor above
        if c in spec and not really_better(ratio(cells(c, base), cells(c, variant)), margin):
            up_to = c  # speculation chosen here, and X is not really slower than no speculation
    if up_to is None:
        return None, None, None
    others = sorted(
        {f"{v} at c={c}" for c, v in spec.items() if v != variant and c <= up_to}
        | {f"{v} at c={c}" for c, v in spec.items() if c > up_to}
    )
    note = None
    if others:
        note = (
            f"A static rule runs one variant: {variant} stands in where another config won "
            f"({'; '.join(others)}); the adaptive tiers, where the variants allow them, "
            "run each level's own choice."
        )
    return variant, up_to, note


def speculation_policy(
    levels: pd.DataFrame,
    mix: TrafficMix | None = None,
    slo: LatencySLO | None = None,
    tie_margin: float = TIE_MARGIN,
) -> Policy | None:
    """The best "X up to N, then no speculation" rule for one run; None without a baseline.

    With an SLO, a variant may only be used at levels where it meets it (the
    baseline is always allowed: it is what runs when speculation is off).
    """
    mix = mix or TrafficMix()
    table = metric_table(levels, "output_throughput")
    base = baseline_name(levels)
    if table.empty or base is None or base not in table.columns:
        return None
    # An adaptive server is a policy already (the engine's own): the rule is built from the
    # static variants, and the export turns it into tiers for the engine (adaptive_export).
    adaptive = set(levels.loc[adaptive_mask(levels), "variant"])
    table = table.drop(columns=[v for v in table.columns if v in adaptive])
    table = table[table[base].notna()]
    spec = [v for v in table.columns if v != base]
    weights = mix.resolve([int(c) for c in table.index])
    allowed = table.notna()
    misses: tuple[int, ...] = ()
    if slo is not None and slo.active:
        meets = slo_mask(levels, slo).reindex_like(table).fillna(False).astype(bool)
        allowed = allowed & meets
        allowed[base] = table[base].notna()
        misses = tuple(int(c) for c in table.index[~meets[base]])
    baseline = table[base]
    rows = [{"variant": None, "up_to": None, "throughput": _weighted(baseline, weights)}]
    for variant in spec:
        for i, n in enumerate(table.index):
            if not allowed[variant].iloc[: i + 1].all():
                break
            mixed = table[variant].where(table.index <= n, baseline)
            rows.append(
                {"variant": variant, "up_to": int(n), "throughput": _weighted(mixed, weights)}
            )
    candidates = pd.DataFrame(rows)
    masked = table.where(allowed)
    judged = judge_levels(levels, tie_margin, masked)
    facts = levels.drop_duplicates("variant").set_index("variant", drop=False)
    simplicity = {str(v): simplicity_key(facts.loc[v]) for v in table.columns}
    lo, hi = interval_tables(levels, "output_throughput")

    def cells(c: int, v: str) -> Interval:
        return cell(table, lo.reindex_like(table), hi.reindex_like(table), c, v)

    variant, up_to, tie_note = rule_from_choices(
        judged, table, base, weights, simplicity, allowed, cells, tie_margin
    )
    mixed = table[variant].where(table.index <= up_to, baseline) if variant else baseline
    best = {"variant": variant, "up_to": up_to, "throughput": _weighted(mixed, weights)}
    later = [int(c) for c in table.index if up_to is not None and c > up_to]
    chosen = (
        table[variant].where(table.index <= up_to, baseline) if variant is not None else baseline
    )
    cvs = throughput_spread(levels).reindex(index=table.index, columns=table.columns)
    chosen_cv = cvs[variant].where(table.index <= up_to, cvs[base]) if variant else cvs[base]
    gain_spread = math.hypot(
        _weighted_spread(chosen, chosen_cv, weights), _weighted_spread(baseline, cvs[base], weights)
    )
    always = {
        v: _weighted(table[v], weights)
        for v in spec
        if all(allowed[v].get(c, False) for c, w in weights.items() if w > 0)
    }
    best_single = max(always, key=always.__getitem__) if always else None
    oracle = table.where(allowed).max(axis=1)
    lo, hi = interval_tables(levels, "output_throughput")
    gain, width = _difference(
        _series(table, base, variant, up_to),
        _series(table, base, None, None),
        table,
        ((hi - lo) / 2.0).reindex_like(table),
        weights,
    )
    base_score = _weighted(baseline, weights)
    gain_lo = gain_hi = math.nan
    if variant is not None and not math.isnan(width):
        gain_lo, gain_hi = (gain - width) / base_score, (gain + width) / base_score
    return Policy(
        variant=variant,
        up_to=up_to,
        next_level=later[0] if later else None,
        pivot=pivot_points(levels).get(variant) if variant else None,
        weights=weights,
        mix=mix,
        slo=slo,
        throughput=float(best["throughput"]),
        baseline_throughput=_weighted(baseline, weights),
        best_single=best_single,
        best_single_throughput=always[best_single] if best_single else math.nan,
        oracle_throughput=_weighted(oracle, weights),
        gain_spread=gain_spread,
        candidates=candidates,
        baseline_misses_slo=misses,
        gain_lo=gain_lo,
        gain_hi=gain_hi,
        tie_note=tie_note,
    )
