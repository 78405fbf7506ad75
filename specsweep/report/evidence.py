"""How the answer's evidence reads, wherever it is shown: the report, the run's Markdown
summary, the answer artifact and the CLI.

One style for every interval: ``value ±h%``, h being half the 95% interval's width
relative to the value (``2,367.4 ±2.1%``, ``1.32x ±2.9%``). A number without an interval
(files before schema 3, synthetic rows) is shown alone: its interval is unknown, not
zero. A percentage change (the policy's gain) is shown with its two ends, as the policy
line says it: ``+5.0% (95%: +3.1% to +6.9%)``. A near-tie is marked ``≈``; a pivot
reads as its 95% range, or as the bracket an inconclusive pivot lies in and the level
to add there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from specsweep.analysis.params import TIE_MARGIN
from specsweep.analysis.pivot import Pivot

TIE = "≈"  # marks a near-tie: a variant the intervals cannot separate from the best

INTERVALS_NOTE = (
    "±: half of the 95% interval, relative to the value. Throughput: Student's t over "
    "time slices of the level, one per wave of C requests, pooled over its passes; "
    "TTFT/ITL percentiles: a bootstrap over requests; a speedup or a lead combines the "
    "two levels' intervals (see docs/metrics.md). No ±: the level has no interval."
)
REPEATS_NOTE = (
    "± (repeats): the spread of the speedup across repeats (CVs of both levels combined), "
    "not a 95% interval."
)


def _finite(x: object) -> bool:
    try:
        return x is not None and not pd.isna(x) and math.isfinite(float(x))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def rel_half(value: object, lo: object, hi: object) -> float:
    """Half the interval's width over |value|; NaN when any is unknown or value is 0."""
    if not (_finite(value) and _finite(lo) and _finite(hi)) or not float(value):  # type: ignore[arg-type]
        return math.nan
    return (float(hi) - float(lo)) / 2.0 / abs(float(value))  # type: ignore[arg-type]


def pm(
    value: object, lo: object = None, hi: object = None, fmt: str = ",.1f", unit: str = ""
) -> str:
    """``value ±h%`` (the value alone without an interval, ``—`` without a value;
    ``±>100%`` when the interval reaches zero or has no upper end: it bounds nothing)."""
    if not _finite(value):
        return "—"
    text = f"{format(float(value), fmt)}{unit}"  # type: ignore[arg-type]
    if _finite(lo) and hi is not None and not pd.isna(hi) and math.isinf(float(hi)):  # type: ignore[arg-type]
        return f"{text} ±>100%"
    half = rel_half(value, lo, hi)
    if math.isnan(half):
        return text
    return f"{text} ±>100%" if half >= 1.0 else f"{text} ±{half:.1%}"


def gain_text(gain: float, lo: float = math.nan, hi: float = math.nan) -> str:
    """A relative change with its 95% ends: ``+5.0% (95%: +3.1% to +6.9%)``."""
    if not _finite(gain):
        return "—"
    text = f"{gain:+.1%}"
    if _finite(lo) and _finite(hi):
        text += f" (95%: {lo:+.1%} to {hi:+.1%})"
    return text


def speedup_text(rec: Mapping[str, Any]) -> str:
    """A best-per-level row's speedup: its 95% interval, else the repeats' spread."""
    speedup = rec.get("speedup")
    if not _finite(speedup):
        return "—"
    if rec.get("best_throughput") == rec.get("baseline_throughput"):
        return f"{float(speedup):.2f}x"  # the baseline is the best: exactly 1, no interval
    if _finite(rec.get("speedup_lo")) and not pd.isna(rec.get("speedup_hi")):
        return pm(speedup, rec["speedup_lo"], rec["speedup_hi"], ".2f", "x")
    spread = rec.get("speedup_spread")
    if _finite(spread) and float(spread) > 0:
        return f"{float(speedup):.2f}x ±{float(spread):.1%} (repeats)"
    return f"{float(speedup):.2f}x"


def lead_text(rec: Mapping[str, Any]) -> str:
    """The best's lead over the runner-up, as a ratio with its interval."""
    return pm(rec.get("lead"), rec.get("lead_lo"), rec.get("lead_hi"), ".3f", "x")


def is_tie(rec: Mapping[str, Any]) -> bool:
    tie = rec.get("near_tie")
    return bool(tie) if tie is not None and not pd.isna(tie) else False


def tied_variants(rec: Mapping[str, Any]) -> list[str]:
    tied = rec.get("tied")
    return [t.strip() for t in str(tied).split(",")] if is_tie(rec) and tied else []


def tie_text(rec: Mapping[str, Any]) -> str:
    """``≈ eagle3-s3-k1-d4; run eagle3-s2-k1-d3`` for a near-tie, "" otherwise."""
    if not is_tie(rec):
        return ""
    text = f"{TIE} {', '.join(tied_variants(rec))}"
    choice = rec.get("choice")
    if choice is not None and not pd.isna(choice):
        simpler = " (simplest)" if choice != rec.get("best_variant") else ""
        text += f"; run {choice}{simpler}"
    return text


def tie_lines(best: pd.DataFrame) -> list[str]:
    """One line per near-tie level: ``c=1: best X ≈ Y, Z; run Y (simplest)``."""
    return [
        f"  c={rec['concurrency']}: best {rec['best_variant']} {tie_text(rec)}"
        for rec in best.to_dict("records")
        if tie_text(rec)
    ]


def run_text(rec: Mapping[str, Any]) -> str:
    """The variant to run at a level: the choice, ``≈``-marked on a near-tie."""
    choice = rec.get("choice")
    if choice is None or pd.isna(choice):
        return str(rec.get("best_variant"))
    return f"{TIE} {choice}" if is_tie(rec) else str(choice)


def best_text(rec: Mapping[str, Any]) -> str:
    """The best variant, marked ``≈`` when a near-tie leaves the choice to simplicity."""
    best = rec.get("best_variant")
    return f"{best} {TIE}" if is_tie(rec) else str(best)


def pivot_cell(pivot: Pivot) -> str:
    """The pivot in a few words: ``22.6 (95%: 19.1 to 26.9)``, ``crosses between c=4
    and c=16; add c=8``, or its kind."""
    if pivot.kind == "crosses":
        text = f"{pivot.concurrency:.3g}" if pivot.concurrency is not None else "crosses"
        if pivot.low is not None and pivot.high is not None:
            text += f" (95%: {pivot.low:.3g} to {pivot.high:.3g})"
        return text + (", soft" if pivot.soft else "")
    if pivot.kind == "inconclusive":
        low, high = pivot.low, pivot.high
        if low is not None and high is not None:
            where = f"between c={low:g} and c={high:g}"
        elif high is not None:
            where = f"at or below c={high:g}"
        elif low is not None:
            where = f"above c={low:g}"
        else:
            where = "in the measured range"
        text = f"crosses {where}"
        return text + (f"; add c={pivot.suggest}" if pivot.suggest is not None else "")
    return pivot.kind


PIVOT_NOTE = (
    "Where the variant's throughput falls below the baseline's, interpolated on "
    "log2(concurrency) between the measured levels. With intervals: 95% is the range the "
    "crossing lies in (soft: wider than a factor 1.25 in c); a level whose speedup interval "
    "holds 1 but lies within the 1% tie margin is level with the baseline, which places the "
    "crossing as well (speculation does not pay there beyond the margin); crosses between "
    "c=a and c=b: a level's speedup interval contains 1 and reaches beyond the margin, so "
    "the crossing is only known to lie in that bracket (measure the suggested level, or "
    "repeat the unsure ones)."
)


def has_intervals(levels: pd.DataFrame) -> bool:
    """Whether any ok level carries an output-throughput interval (schema 3)."""
    if levels.empty or "output_throughput_lo" not in levels.columns:
        return False
    return bool(levels["output_throughput_lo"].notna().any())


def target_ci_line(levels: pd.DataFrame) -> str | None:
    """Whether load.target_ci was met, when any level had one: the levels that missed it.

    None when no level had a target.
    """
    if "target_ci" not in levels.columns or levels.empty:
        return None
    rows = levels[(levels["status"] == "ok") & levels["target_ci"].notna()]
    if rows.empty:
        return None
    targets = ", ".join(f"±{t:.1%}" for t in sorted(rows["target_ci"].unique()))
    met = rows["target_ci_met"] if "target_ci_met" in rows.columns else pd.Series(dtype=object)
    missed = rows[met.astype("boolean").eq(False).fillna(False).to_numpy(dtype=bool)]
    if missed.empty:
        return f"Target interval {targets} (load.target_ci): met at every level."
    missed = missed.sort_values(["variant", "concurrency"])
    parts = []
    for rec in missed.to_dict("records"):
        half = rel_half(*(rec.get(f"output_throughput{e}") for e in ("", "_lo", "_hi")))
        width = f" (±{half:.1%})" if not math.isnan(half) else ""
        parts.append(f"{rec['variant']} c={rec['concurrency']}{width}")
    return (
        f"Target interval {targets} (load.target_ci) missed at {len(parts)} of {len(rows)} "
        f"levels (the time or request cap came first): {'; '.join(parts)}."
    )


def tied_at(best: pd.DataFrame) -> dict[int, set[str]]:
    """Per concurrency, the variants in a near-tie with the best (best_per_level rows)."""
    if best.empty or "near_tie" not in best.columns:
        return {}
    return {int(rec["concurrency"]): set(tied_variants(rec)) for rec in best.to_dict("records")}


SKIPPED_CELL = "skipped"  # a level a search chose not to measure: not a failure, no number


def skipped_cells(skipped: pd.DataFrame | None) -> set[tuple[int, str]]:
    """(concurrency, variant) of a search's skipped levels (variant, concurrency rows)."""
    if skipped is None or skipped.empty:
        return set()
    pairs = zip(skipped["variant"], skipped["concurrency"], strict=True)
    return {(int(c), str(v)) for v, c in pairs}


def throughput_rows(
    table: pd.DataFrame,
    lo: pd.DataFrame,
    hi: pd.DataFrame,
    best: pd.DataFrame,
    skipped: set[tuple[int, str]] | None = None,
) -> list[list[str]]:
    """One row per level of the throughput table: ``value ±h%``, ``≈`` before the variants
    in a near-tie with the best; ``skipped`` where a search chose not to measure the level
    (`skipped`: its (concurrency, variant) pairs), so a reader never takes it for a failure."""
    skipped = skipped or set()
    tied = tied_at(best)
    lo = lo.reindex_like(table) if not lo.empty else pd.DataFrame(index=table.index)
    hi = hi.reindex_like(table) if not hi.empty else pd.DataFrame(index=table.index)
    rows = []
    for c, row in table.iterrows():
        cells = []
        for v, value in row.items():
            if (int(c), str(v)) in skipped and pd.isna(value):
                cells.append(SKIPPED_CELL)
                continue
            text = pm(value, lo.get(v, pd.Series()).get(c), hi.get(v, pd.Series()).get(c))
            cells.append(f"{TIE} {text}" if v in tied.get(int(c), ()) else text)
        rows.append(cells)
    return rows


BEST_HEADER = ["concurrency", "best", "tok/s", "speedup", "lead over the runner-up", "near-tie"]


def best_rows(best: pd.DataFrame) -> list[list[str]]:
    """Per level (BEST_HEADER): the best with its interval, its speedup, the runner-up and
    the lead, and a near-tie's tied variants and choice."""
    rows = []
    for rec in best.to_dict("records"):
        runner = rec.get("runner_up")
        lead = "—"
        if runner is not None and not pd.isna(runner):
            lead = f"{lead_text(rec)} over {runner}"
        rows.append(
            [
                str(rec["concurrency"]),
                best_text(rec),
                pm(rec.get("best_throughput"), rec.get("best_lo"), rec.get("best_hi")),
                speedup_text(rec),
                lead,
                tie_text(rec) or "no",
            ]
        )
    return rows


def best_note(best: pd.DataFrame) -> str:
    """What the best-per-level columns mean: ≈ when a level has a near-tie, ± (repeats)
    where the levels have no interval but repeats."""
    note = "speedup = best / baseline; lead = best / runner-up."
    if tied_at(best) and any(tied_at(best).values()):
        note += (
            f" {TIE}: a near-tie: the best's lead over each variant listed (the low end of its "
            f"95% interval, where known) is under {1 + TIE_MARGIN:g}x, so they are not "
            "separated; the simplest of them is the one to run."
        )
    known = best.get("speedup_lo", pd.Series(dtype=float)).notna().any()
    spreads = best.get("speedup_spread", pd.Series(dtype=float)).fillna(0).gt(0).any()
    if spreads and not known:
        note += " " + REPEATS_NOTE
    return note


def pivot_line(pivot: Pivot) -> str:
    """The pivot's full sentence, marked soft when its range is wide."""
    soft = "; soft: the range is wider than a factor 1.25 in c" if pivot.soft else ""
    return pivot.describe() + (soft if pivot.kind == "crosses" else "")


def _one(levels: pd.DataFrame, column: str) -> str | None:
    """The column's distinct values joined (None when it is absent or all null)."""
    if levels.empty or column not in levels.columns:
        return None
    values = sorted(str(v) for v in levels[column].dropna().unique())
    return ", ".join(values) or None


def load_text(levels: pd.DataFrame, shape: str | None = None) -> str | None:
    """What the answer was measured under: ``in512-out256, builtin prompts via chat``.

    `shape`: the answer's shape (else the rows' own, when they hold exactly one). None when
    the rows say neither (results written before load shapes)."""
    if shape is None:
        shapes = _one(levels, "shape")
        shape = shapes if shapes and "," not in shapes else None
    workload, endpoint = _one(levels, "workload"), _one(levels, "endpoint")
    sent = f"{workload} prompts" if workload else ""
    if endpoint:
        sent = f"{sent} via {endpoint}".strip()
    parts = [p for p in (shape, sent) if p]
    return ", ".join(parts) or None


def at_text(levels: pd.DataFrame, shape: str | None = None) -> str:
    """`` at in512-out256, builtin prompts via chat`` for a title ("" when unknown)."""
    text = load_text(levels, shape)
    return f" at {text}" if text else ""
