"""How an adaptive search reads in every view: the report's Search section, the answer
artifact, the run summary and the CLI.

The golden rule: measured and predicted never mix. Every number from the search's model
is written beside the word "predicted" (tables: "predicted (not measured)" in the title
or header); measured numbers are in the answer's own tables. A run without a search gets
none of this: every function returns nothing for it.
"""

from __future__ import annotations

import math

import pandas as pd

from specsweep.analysis.answer import SearchView
from specsweep.report.tables import Table, num
from specsweep.search.informative import uninformative

PREDICTED = "predicted (not measured)"
SEARCH_NOTE = (
    "The answer above (best per level, pivots, policy, throughput) is built from measured "
    "levels only; the search's model predictions below are kept apart and never enter it."
)


def _ratio(value: object, at: object) -> str:
    if value is None or pd.isna(value):  # type: ignore[arg-type]
        return "—"
    return f"{float(value):.2f}x at c={int(at)}"  # type: ignore[arg-type]


def launched_text(view: SearchView) -> str:
    """``launched 6 of 25 variants (stopped: ...)``."""
    launched, grid = view.launched_variants(), view.grid_variants()
    text = f"launched {len(launched)} of {len(grid)} variant{'s' if len(grid) != 1 else ''}"
    return text + (f" (stopped: {view.stop})" if view.stop else "")


def not_launched_text(view: SearchView) -> str | None:
    """``19 not launched: best predicted 0.97x of the measured best (X at c=1)``; None when
    every variant was launched."""
    rows = view.not_launched()
    if rows.empty:
        return None
    text = f"{len(rows)} not launched"
    top = rows.iloc[0]
    if not pd.isna(top["best_ratio"]):
        text += (
            f": best predicted {top['best_ratio']:.2f}x of the measured best "
            f"({top['variant']} at c={int(top['best_at'])})"
        )
    return text


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def cost_text(view: SearchView) -> str | None:
    """``4 launches (1 a relaunch) against the grid's 6 (67%); servers held 3.0 min (2.0
    min of it launch to ready) against the whole grid's estimated 5.2 min (57%; ...)``;
    None without phase records."""
    t = view.server_time()
    if t is None:
        return None
    again = t.relaunches
    relaunched = f" ({again} a relaunch)" if again == 1 else f" ({again} relaunches)"
    text = (
        f"{t.holds} launch{'es' if t.holds != 1 else ''}{relaunched if again > 0 else ''} "
        f"against the grid's {t.grid_launches} ({t.launch_share:.0%}); servers held "
        f"{_duration(t.held_s)} ({_duration(t.launch_s)} of it launch to ready)"
    )
    if t.grid_s is not None and t.time_share is not None:
        text += (
            f" against the whole grid's estimated {_duration(t.grid_s)} ({t.time_share:.0%}; "
            "each variant not launched at this run's median time per launch and per level)"
        )
    return text


def skipped_text(view: SearchView) -> str | None:
    """``7 levels skipped (not measured: the variant trailed the best)``; None when none."""
    skipped = view.skipped_levels
    if skipped.empty:
        return None
    variants = skipped["variant"].nunique()
    return (
        f"{len(skipped)} level{'s' if len(skipped) != 1 else ''} of {variants} "
        f"variant{'s' if variants != 1 else ''} skipped (not measured, not failures)"
    )


def check_text(view: SearchView) -> str | None:
    """``predicted vs measured: 11 of 12 levels inside the predicted 95% interval, median
    error 3.1%``; None when no prediction was followed by a measurement."""
    measured, inside, median = view.check_summary()
    if not measured:
        return None
    check = view.prediction_check()  # issue 29: a calibrated model may still know nothing
    wide = uninformative(check["predicted"], check["predicted_lo"], check["predicted_hi"])
    return (
        f"predicted before launch vs measured: {inside} of {measured} levels inside the "
        f"predicted 95% interval, median |predicted / measured - 1| {median:.1%}"
    ) + (f"; warning: {wide}" if wide else "")


def search_lines(view: SearchView | None) -> list[str]:
    """The CLI's lines (one to three: what it launched, what that cost, what it skipped
    and how its predictions fared), each starting ``search:``; none without a search."""
    if view is None or not view.present:
        return []
    first = f"search: {launched_text(view)}"
    rest = not_launched_text(view)
    lines = [f"{first}; {rest}" if rest else first]
    if (cost := cost_text(view)) is not None:
        lines.append(f"search: {cost}")
    second = [t for t in (skipped_text(view), check_text(view)) if t]
    if second:
        lines.append("search: " + "; ".join(second))
    return lines


def search_headline(view: SearchView | None) -> str | None:
    """The report's one sentence under its headline: what the answer was chosen among."""
    if view is None or not view.present:
        return None
    text = f"Adaptive search: {launched_text(view)}"
    rest = not_launched_text(view)
    t = view.server_time()
    share = t.time_share if t is not None else None
    cost = f"; its servers held {share:.0%} of the whole grid's estimated time" if share else ""
    return text + (f"; {rest}" if rest else "") + cost + ". See the Search section."


def skipped_table(view: SearchView) -> Table | None:
    """The skipped levels, one row per variant and reason (its levels joined)."""
    skipped = view.skipped_levels
    if skipped.empty:
        return None
    rows = []
    for (variant, reason), group in skipped.groupby(["variant", "reason"], sort=True):
        levels = ", ".join(str(int(c)) for c in sorted(group["concurrency"]))
        rows.append([str(variant), levels, str(reason)])
    return Table(
        "Levels skipped by the search (not measured, not failures)",
        ["variant", "concurrency", "why skipped"],
        rows,
        [False, False, False],
        note="These cells read 'skipped' in the throughput table: the variant could no "
        "longer change the answer there.",
    )


def not_launched_table(view: SearchView) -> Table | None:
    """The variants not launched, closest to the measured best first, with why."""
    rows_frame = view.not_launched()
    if rows_frame.empty:
        return None

    def param(value: object) -> str:
        return "—" if value is None or pd.isna(value) else str(int(value))  # type: ignore[arg-type]

    rows = [
        [
            str(r["variant"]),
            param(r["num_steps"]),
            param(r["topk"]),
            param(r["num_draft_tokens"]),
            _ratio(r["best_ratio"], r["best_at"]),
            _ratio(r["upper_ratio"], r["upper_at"]),
            str(r["reason"] or "—"),
        ]
        for r in rows_frame.to_dict("records")
    ]
    cols = ["variant", "steps", "topk", "draft tokens", "predicted / measured best",
            "95% upper bound / measured best", "why not launched"]  # fmt: skip
    return Table(
        f"Variants not launched, {PREDICTED}",
        cols,
        rows,
        [False, True, True, True, True, True, False],
        note="Closest to the measured best first. predicted / measured best: the highest, "
        "over the levels, of the model's predicted output throughput divided by the best "
        "measured there (from all the run's measurements); the upper bound is its 95% "
        "prediction interval's high end. Not measured: none of it is in the answer.",
    )


def _interval(value: float, lo: float, hi: float) -> str:
    if math.isnan(value):
        return "—"
    if math.isnan(lo) or math.isnan(hi):
        return num(value)
    return f"{num(value)} (95%: {num(lo)} to {num(hi)})"


def check_table(view: SearchView) -> Table | None:
    """Each launched variant's prediction made before its launch, beside its measurement."""
    check = view.prediction_check()
    if check.empty:
        return None
    several = check["target"].nunique() > 1
    rows, bold = [], set()
    for i, r in enumerate(check.to_dict("records")):
        measured = r["status"] != "ok" or pd.isna(r["measured"])
        inside = r["inside"]
        row = [
            str(r["variant"]),
            *([str(r["target"])] if several else []),
            str(r["concurrency"]),
            _interval(r["predicted"], r["predicted_lo"], r["predicted_hi"]),
            str(r["status"]) if measured else num(r["measured"]),
            "—" if measured else f"{r['error']:+.1%}",
            "—" if inside is None else ("yes" if inside else "no"),
        ]
        rows.append(row)
        if inside is False:
            bold.add((i, len(row) - 1))
    cols = ["variant", *(["target"] if several else []), "concurrency",
            "predicted before launch, tok/s", "measured tok/s", "error", "inside 95%"]  # fmt: skip
    measured_n, inside_n, median = view.check_summary()
    summary = (
        f" {inside_n} of {measured_n} measured levels fell inside the predicted 95% interval; "
        f"median |error| {median:.1%}."
        if measured_n
        else ""
    )
    return Table(
        "Predicted before launch vs measured (the model's error)",
        cols,
        rows,
        [False, *([False] if several else []), True, True, True, True, False],
        note="What the model predicted for each launched variant from the measurements made "
        "until then, and what its launch then measured. error = predicted / measured - 1 "
        "(positive: the model over-predicted); bold: outside the interval; skipped or failed "
        "levels have no measurement." + summary,
        highlight=bold,
    )


def search_tables(view: SearchView | None) -> list[Table]:
    """The Search section's tables, in order; none without a search."""
    if view is None or not view.present:
        return []
    tables = [skipped_table(view), not_launched_table(view), check_table(view)]
    return [t for t in tables if t is not None]


def search_paragraphs(view: SearchView | None) -> list[str]:
    """The Search section's sentences before its tables; none without a search."""
    if view is None or not view.present:
        return []
    launched = view.launched_variants()
    out = [f"The search {launched_text(view)}: {', '.join(launched)}."]
    texts = (not_launched_text(view), cost_text(view), skipped_text(view), check_text(view))
    rest = [t for t in texts if t]
    out += [f"{t[0].upper()}{t[1:]}." for t in rest]
    out.append(SEARCH_NOTE)
    return out
