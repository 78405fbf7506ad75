"""Per-level views of one run: tables by variant, best per level, latency and SLOs.

Everything takes the `levels` table as read from Parquet (one run, or the
rows of one run filtered from many) and returns plain DataFrames, so a
notebook can use it without the report.

A run on a fleet can hold the same (variant, concurrency) from several
targets (a variant re-run elsewhere after its host died). The answer never
mixes them: `answer_rows` keeps, per run and variant, the rows of one target
(see `chosen_targets`), and every view here goes through it via `ok_levels`.
The other targets' rows are for the host comparison (analysis/hosts.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from specsweep.analysis.params import TIE_MARGIN, LatencySLO
from specsweep.analysis.tie_rule import LevelJudgment, Option, judge_level
from specsweep.results.intervals import Interval, ratio

LATENCY_COLUMNS = ["ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99"]
_SORT_KEYS = ["algorithm", "num_steps", "topk", "num_draft_tokens", "spec_v2", "variant"]


def _variant_key(levels: pd.DataFrame) -> list[str]:
    return ["run_id", "variant"] if "run_id" in levels.columns else ["variant"]


def chosen_targets(levels: pd.DataFrame) -> pd.DataFrame:
    """Per (run_id, variant): the one target whose rows the answer uses.

    The target with the most `status == ok` levels of that variant; ties go to
    the latest `ended_at` (the re-run), then to the target name. Columns:
    run_id, variant, target, ok_levels, ended_at, targets (how many targets
    measured the variant in that run).
    """
    keys = _variant_key(levels)
    ended = levels["ended_at"] if "ended_at" in levels.columns else pd.NaT
    per = (
        levels.assign(_ok=levels["status"].eq("ok"), _ended=ended)
        .groupby([*keys, "target"], as_index=False, dropna=False)
        .agg(ok_levels=("_ok", "sum"), ended_at=("_ended", "max"))
    )
    per["targets"] = per.groupby(keys, dropna=False)["target"].transform("size")
    per = per.sort_values(
        [*keys, "ok_levels", "ended_at", "target"],
        ascending=[*([True] * len(keys)), False, False, True],
        na_position="last",
    )
    return per.drop_duplicates(keys).reset_index(drop=True)


def answer_rows(levels: pd.DataFrame) -> pd.DataFrame:
    """The rows an answer is built from: per run and variant, those of its chosen target.

    Unchanged (the same object) when every run has a single target.
    """
    if "target" not in levels.columns or levels.empty:
        return levels
    if levels.groupby(_variant_key(levels), dropna=False)["target"].nunique().max() <= 1:
        return levels
    keys = [*_variant_key(levels), "target"]
    chosen = pd.MultiIndex.from_frame(chosen_targets(levels)[keys])
    return levels[pd.MultiIndex.from_frame(levels[keys]).isin(chosen)]


def ok_levels(levels: pd.DataFrame) -> pd.DataFrame:
    """Only measured levels (status ok) of the chosen targets enter comparisons.

    Failed levels are reported apart; other targets' rows go to the host comparison.
    """
    rows = answer_rows(levels)
    return rows[rows["status"] == "ok"]


def adaptive_mask(rows: pd.DataFrame) -> pd.Series:
    """Rows of adaptive variants (a missing or null `adaptive` column reads False: files
    written before schema 2, and static variants)."""
    if "adaptive" not in rows.columns:
        return pd.Series(False, index=rows.index)
    return rows["adaptive"].astype("boolean").fillna(False).astype(bool)


def variant_order(levels: pd.DataFrame) -> list[str]:
    """Baseline first, then speculative variants by algorithm and parameters (legend order)."""
    keys = [k for k in _SORT_KEYS if k in levels.columns]
    # only the columns the order reads: a whole levels frame is ~100 columns wide
    firsts = levels[list(dict.fromkeys(["variant", "is_baseline", *keys]))]
    firsts = firsts.drop_duplicates("variant")
    spec = firsts[~firsts["is_baseline"]].sort_values(keys, na_position="first")
    return [*firsts.loc[firsts["is_baseline"], "variant"], *spec["variant"]]


def baseline_name(levels: pd.DataFrame) -> str | None:
    names = levels.loc[levels["is_baseline"], "variant"].unique()
    return str(names[0]) if len(names) else None


def metric_table(levels: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Index concurrency, one column per variant (legend order), ok levels only."""
    ok = ok_levels(levels)
    if ok.empty:
        return pd.DataFrame()
    table = mean_table(ok, metric)
    return table[[v for v in variant_order(ok) if v in table.columns]]


def mean_table(rows: pd.DataFrame, values: str, dropna: bool = True) -> pd.DataFrame:
    """`rows.pivot_table(index="concurrency", columns="variant", values=values)` (the mean),
    all-NaN rows and columns dropped unless `dropna` is False, as pivot_table does; a
    groupby costs a fifth of it, and an answer builds some fifty such tables."""
    grouped = rows.groupby(["concurrency", "variant"], sort=True)[values].mean()
    if dropna:
        grouped = grouped.dropna()
    table = grouped.unstack("variant")
    if dropna:
        table = table.dropna(axis=1, how="all")
    return table


def interval_tables(levels: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(lo, hi) of the metric's 95% interval, shaped like metric_table; NaN where a level has
    none (files before schema 3, synthetic rows)."""
    table = metric_table(levels, metric)
    ok = ok_levels(levels)
    out = []
    for end in ("lo", "hi"):
        column = f"{metric}_{end}"
        if table.empty or column not in ok.columns or ok[column].isna().all():
            out.append(pd.DataFrame(np.nan, index=table.index, columns=table.columns))
            continue
        bound = mean_table(ok, column, dropna=False)
        out.append(bound.reindex(index=table.index, columns=table.columns))
    return out[0], out[1]


def cell(table: pd.DataFrame, lo: pd.DataFrame, hi: pd.DataFrame, c: int, v: str) -> Interval:
    """One (concurrency, variant) of a metric with its interval."""
    return Interval(float(table.at[c, v]), float(lo.at[c, v]), float(hi.at[c, v]))


def simplicity_key(facts: pd.Series | dict) -> tuple:
    """Orders variants simplest first: no speculation, then fewer draft steps, a narrower
    tree, fewer draft tokens, a static server before an adaptive one."""

    def num(name: str) -> float:
        value = facts.get(name)
        return float(value) if value is not None and not pd.isna(value) else 0.0

    adaptive = facts.get("adaptive")
    adaptive = adaptive is not None and not pd.isna(adaptive) and bool(adaptive)
    return (
        0 if bool(facts.get("is_baseline")) else 1,
        num("num_steps"),
        num("topk"),
        num("num_draft_tokens"),
        1
        if adaptive is True or (adaptive is not None and not pd.isna(adaptive) and adaptive)
        else 0,
        str(facts.get("variant")),
    )


def simplest(levels: pd.DataFrame, variants: Sequence[str]) -> str:
    """The simplest of these variants (simplicity_key)."""
    firsts = levels.drop_duplicates("variant").set_index("variant", drop=False)
    return min(variants, key=lambda v: simplicity_key(firsts.loc[v]) if v in firsts.index else ())


def throughput_spread(levels: pd.DataFrame) -> pd.DataFrame:
    """CV of output throughput across repeats per (concurrency, variant); NaN for one pass."""
    ok = ok_levels(levels)
    if ok.empty:
        return pd.DataFrame()
    cv = ok.assign(cv=ok["output_throughput_cv"].where(ok["repeats"].fillna(1) > 1))
    table = cv.pivot_table(
        index="concurrency", columns="variant", values="cv", aggfunc="mean", dropna=False
    )
    return table.reindex(columns=variant_order(ok))


def ratio_spread(cv_a: float, cv_b: float) -> float:
    """Relative spread of a / b from the two CVs (first-order error propagation)."""
    return math.hypot(cv_a, cv_b) if not (math.isnan(cv_a) or math.isnan(cv_b)) else math.nan


def argmax_columns(table: pd.DataFrame) -> pd.Series:
    """Per row, the column holding the largest value; None where the row is all NaN."""
    return pd.Series(
        [row.idxmax() if row.notna().any() else None for _, row in table.iterrows()],
        index=table.index,
        dtype=object,
    )


def best_per_level(
    levels: pd.DataFrame, slo: LatencySLO | None = None, tie_margin: float = TIE_MARGIN
) -> pd.DataFrame:
    """The highest-throughput variant at each concurrency, with its speedup over the baseline.

    Columns: concurrency, best_variant, best_throughput, best_lo/best_hi (its 95%
    interval), baseline_throughput, speedup, speedup_lo/speedup_hi, speedup_spread
    (relative, from the repeats' CVs; NaN when a level was measured once); the evidence:
    runner_up, lead (best / runner-up) with lead_lo/lead_hi, near_tie (the lead's interval
    reaches below 1 + tie_margin), tied (the variants the best is not separated from,
    comma-joined) and choice (the simplest of the best and those tied: what a policy
    should run there); and with an SLO: the best variant among those that meet it (None
    when none does) and whether the baseline meets it. Intervals are NaN where the
    levels have none; then near_tie judges the lead alone against the margin.
    """
    throughput = metric_table(levels, "output_throughput")
    if throughput.empty:
        return pd.DataFrame(
            columns=["concurrency", "best_variant", "best_throughput", "speedup", "speedup_spread"]
        )
    cvs = throughput_spread(levels).reindex(index=throughput.index, columns=throughput.columns)
    base = baseline_name(levels)
    out = pd.DataFrame(index=throughput.index)
    out["best_variant"] = argmax_columns(throughput)
    out["best_throughput"] = throughput.max(axis=1)
    best_cv = [cvs.at[c, v] for c, v in out["best_variant"].items()]
    if base is not None and base in throughput.columns:
        out["baseline_throughput"] = throughput[base]
        out["speedup"] = out["best_throughput"] / out["baseline_throughput"]
        out["speedup_spread"] = [
            0.0 if v == base else ratio_spread(b, cvs.at[c, base])
            for c, v, b in zip(out.index, out["best_variant"], best_cv, strict=True)
        ]
    else:
        out["baseline_throughput"] = np.nan
        out["speedup"] = np.nan
        out["speedup_spread"] = np.nan
    out = out.join(_evidence(levels, throughput, base, tie_margin))
    if slo is not None and slo.active:
        meets = slo_mask(levels, slo)
        allowed = throughput.where(meets.reindex_like(throughput).fillna(False).astype(bool))
        out["best_variant_slo"] = argmax_columns(allowed)
        out["best_throughput_slo"] = allowed.max(axis=1)
        if base is not None and base in throughput.columns:
            out["speedup_slo"] = out["best_throughput_slo"] / out["baseline_throughput"]
            out["baseline_meets_slo"] = meets.reindex(throughput.index)[base].fillna(False)
    return out.reset_index()


def options_at(
    levels: pd.DataFrame, throughput: pd.DataFrame, lo: pd.DataFrame, hi: pd.DataFrame, c: int
) -> list[Option]:
    """The tie rule's options at one level: every variant measured there, with its interval
    and its place in the simplicity order."""
    firsts = levels.drop_duplicates("variant").set_index("variant", drop=False)
    row = throughput.loc[c].dropna()
    return [
        Option(
            str(v),
            cell(throughput, lo, hi, c, str(v)),
            simplicity_key(firsts.loc[v]) if v in firsts.index else (),
        )
        for v in row.index
    ]


def judge_levels(
    levels: pd.DataFrame, tie_margin: float = TIE_MARGIN, throughput: pd.DataFrame | None = None
) -> dict[int, LevelJudgment]:
    """Every level of these rows decided by the one tie rule (tie_rule.judge_level), over
    the variants of `throughput` (default: every variant's output_throughput table)."""
    table = metric_table(levels, "output_throughput") if throughput is None else throughput
    if table.empty:
        return {}
    lo, hi = interval_tables(levels, "output_throughput")
    lo, hi = lo.reindex_like(table), hi.reindex_like(table)
    out = {}
    for c in table.index:
        options = options_at(levels, table, lo, hi, int(c))
        if options:
            out[int(c)] = judge_level(int(c), options, tie_margin)
    return out


def _evidence(
    levels: pd.DataFrame, throughput: pd.DataFrame, base: str | None, tie_margin: float
) -> pd.DataFrame:
    lo, hi = interval_tables(levels, "output_throughput")
    judged = judge_levels(levels, tie_margin, throughput)
    rows = []
    for c in throughput.index:
        j = judged.get(int(c))
        if j is None:
            rows.append({"concurrency": c})
            continue
        top = cell(throughput, lo, hi, c, j.best)
        entry: dict = {"concurrency": c, "best_lo": top.lo, "best_hi": top.hi}
        if j.best == base:  # the baseline against itself: exactly 1
            entry["speedup_lo"] = entry["speedup_hi"] = 1.0
        elif base is not None and not pd.isna(throughput.at[c, base]):
            speedup = ratio(top, cell(throughput, lo, hi, c, base))
            entry["speedup_lo"], entry["speedup_hi"] = speedup.lo, speedup.hi
        if j.runner_up is not None:
            entry.update(
                runner_up=j.runner_up, lead=j.lead.value, lead_lo=j.lead.lo, lead_hi=j.lead.hi
            )
        entry["near_tie"] = bool(j.tied)
        entry["tied"] = ", ".join(j.tied) if j.tied else None
        entry["choice"] = j.choice
        entry["status"] = j.status
        entry["rival"] = j.rival
        entry["rival_ratio"] = j.rival_ratio.value
        entry["rival_lo"] = j.rival_ratio.lo
        entry["rival_hi"] = j.rival_ratio.hi
        rows.append(entry)
    columns = [
        "best_lo", "best_hi", "speedup_lo", "speedup_hi", "runner_up", "lead", "lead_lo",
        "lead_hi", "near_tie", "tied", "choice", "status", "rival", "rival_ratio", "rival_lo",
        "rival_hi",
    ]  # fmt: skip
    frame = pd.DataFrame(rows).set_index("concurrency") if rows else pd.DataFrame()
    return frame.reindex(columns=columns, index=throughput.index)


def latency_table(levels: pd.DataFrame, slo: LatencySLO | None = None) -> pd.DataFrame:
    """TTFT and ITL p50/p99 per (variant, concurrency), with `meets_slo` when an SLO is given."""
    ok = ok_levels(levels)
    cols = ["variant", "concurrency", *LATENCY_COLUMNS]
    table = ok.groupby(["variant", "concurrency"], as_index=False)[LATENCY_COLUMNS].mean()
    rank = {v: i for i, v in enumerate(variant_order(ok))} if not ok.empty else {}
    table["_rank"] = table["variant"].map(rank)
    table = table.sort_values(["_rank", "concurrency"])[cols]
    if slo is not None and slo.active:
        table["meets_slo"] = _meets(table, slo)
    return table.reset_index(drop=True)


def _meets(frame: pd.DataFrame, slo: LatencySLO) -> pd.Series:
    ok = pd.Series(True, index=frame.index)
    if slo.ttft_p99_ms is not None:
        ok &= frame["ttft_ms_p99"] <= slo.ttft_p99_ms
    if slo.itl_p99_ms is not None:
        ok &= frame["itl_ms_p99"] <= slo.itl_p99_ms
    return ok


def slo_mask(levels: pd.DataFrame, slo: LatencySLO) -> pd.DataFrame:
    """Index concurrency, one bool column per variant: does it meet the SLO there."""
    table = latency_table(levels)
    table["meets"] = _meets(table, slo)
    return table.pivot(index="concurrency", columns="variant", values="meets")
