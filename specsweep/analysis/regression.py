"""Nightly regression verdicts: each number of a run against its own history.

A series is one (target, model, variant, concurrency, input_len, output_len,
workload): the load shape and what was sent belong to the key, so an ad-hoc run with
other lengths or prompts in the same store never becomes another's history (real
prompts accept more than random ids; rows from before workloads were recorded count as
random ids, the default then). For each metric of the
policy, the value of the judged run is compared with the median of the same
series over the most recent earlier runs, and the noise is the robust
standard deviation 1.4826 x MAD of those runs (or the run's own repeat
spread, when larger). The verdict is a regression only when the change is
in the bad direction, larger than `mad_threshold` noise units, and larger
than the metric's minimum relative change; and, for a metric whose level
carries a 95% interval tonight (`<metric>_lo/_hi`, schema 3), only when
tonight's interval and the history's (see `history_interval`) separate.
Levels without intervals (files before schema 3) are judged by the first
three conditions alone, as before. A run measured on several
targets enters with the rows its answer uses (levels.answer_rows), so the
partial rows of a host that died mid-variant are neither judged nor history.
See docs/analysis.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analysis.adaptive_export import export_adaptive
from specsweep.analysis.adaptive_verify import verify_adaptive
from specsweep.analysis.baselines import gpu_kind, kind_frames
from specsweep.analysis.compare import environment_changes, run_changes
from specsweep.analysis.levels import answer_rows
from specsweep.analysis.params import HIGHER_IS_BETTER, RegressionPolicy
from specsweep.errors import PolicyExportRefused
from specsweep.results.store import ResultsStore

SERIES_KEY = [
    "target", "model_path", "variant", "concurrency", "input_len", "output_len", "workload",
]  # fmt: skip
# Rows from before workloads were recorded (schema < 5) sent specsweep's default then.
LEGACY_WORKLOAD = "random-ids"
FLEET_KIND = "fleet_sweep"  # levels.sweep_kind of a fleet run: its series are per GPU kind
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution x this = its standard deviation
Z95 = 1.959964  # a normal distribution's 95% interval is its mean +- this many SDs

# The series of a run's own export (its tiers, hence its name, may change from night to
# night): the exported config's share of the best a tier config reaches, per level.
EXPORTED = "exported-tiers"

REGRESSION, IMPROVEMENT, OK = "regression", "improvement", "ok"
FAILED, NEW, INSUFFICIENT = "failed", "new", "insufficient history"


@dataclass(frozen=True)
class RegressionReport:
    """The verdict on one run, with every number behind it."""

    run_id: str
    policy: RegressionPolicy
    verdicts: pd.DataFrame  # one row per (series, metric); see judge_run
    history_run_ids: list[str]
    environment: dict[str, tuple[str, str]] = field(default_factory=dict)  # vs the last run

    @property
    def regressions(self) -> pd.DataFrame:
        bad = {REGRESSION} | ({FAILED} if self.policy.on_failed_level == "regression" else set())
        return self.verdicts[self.verdicts["verdict"].isin(bad)]

    @property
    def improvements(self) -> pd.DataFrame:
        return self.verdicts[self.verdicts["verdict"] == IMPROVEMENT]

    @property
    def regressed(self) -> bool:
        return not self.regressions.empty

    def headline(self) -> str:
        counts = self.verdicts["verdict"].value_counts().to_dict() if len(self.verdicts) else {}
        parts = [f"{n} {v}" for v, n in sorted(counts.items())]
        status = "REGRESSION" if self.regressed else "no regression"
        return f"run {self.run_id}: {status} ({', '.join(parts) or 'nothing judged'})"

    def message(self) -> str:
        """Names every regressed metric with its numbers, then the environment change."""
        lines = [self.headline()]
        lines += [f"  {describe_row(r)}" for r in self.regressions.to_dict("records")]
        lines += [f"  improved: {describe_row(r)}" for r in self.improvements.to_dict("records")]
        if self.environment:
            lines.append("  changed since the previous run: " + _env_text(self.environment))
        return "\n".join(lines)

    def event_payload(self) -> dict[str, Any]:
        """JSON-ready details for `specsweep.regression.detected` (automations template on it)."""
        cols = [
            "target",
            "model_path",
            "variant",
            "concurrency",
            "metric",
            "value",
            "value_lo",
            "value_hi",
            "median",
            "history_lo",
            "history_hi",
            "change",
            "robust_z",
            "n_history",
            "verdict",
            "environment",
        ]
        rows = self.regressions[cols].replace({np.nan: None}).to_dict("records")
        return {
            "run_id": self.run_id,
            "summary": self.headline(),
            "metrics": sorted({r["metric"] for r in rows}),
            "regressions": [{k: _plain(v) for k, v in r.items()} for r in rows],
            "environment_changes": {k: list(v) for k, v in self.environment.items()},
            "history_run_ids": self.history_run_ids,
        }


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _env_text(env: dict[str, tuple[str, str]]) -> str:
    return "; ".join(f"{k}: {a} -> {b}" for k, a, b in ((k, *v) for k, v in env.items()))


def describe_row(row: dict[str, Any]) -> str:
    """One verdict as a sentence: 'eagle3-s2 c=4 output_throughput 1,234 vs median 1,342 ...'."""
    where = f"{row['variant']} c={row['concurrency']} ({row['target']})"
    if row["verdict"] == FAILED:
        return f"{where}: failed tonight ({row['error']}), succeeded in its history"
    now = _bounds(row.get("value_lo"), row.get("value_hi"))
    past = _bounds(row.get("history_lo"), row.get("history_hi"))
    text = (
        f"{where} {row['metric']} {row['value']:,.4g}{now} vs median {row['median']:,.4g}"
        f"{past} of {row['n_history']} runs ({row['change']:+.1%}, "
        f"{row['robust_z']:+.1f} noise units)"
    )
    if row.get("environment"):
        text += f"; came with {row['environment']}"
    return text


def _bounds(lo: Any, hi: Any) -> str:
    """' [lo, hi]' (a 95% interval) when both are known, else ''."""
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return ""
    return f" [{lo:,.4g}, {hi:,.4g}]"


def _finite(value: Any) -> float:
    """A float, NaN for None/NA (a missing interval column reads None from a dict row)."""
    return float(value) if value is not None and pd.notna(value) else math.nan


def run_order(levels: pd.DataFrame) -> list[str]:
    """Run ids by their first measured level (run ids are time-sortable; user ids may not be)."""
    starts = levels.groupby("run_id")["started_at"].min()
    return sorted(starts.index, key=lambda r: (starts[r] if pd.notna(starts[r]) else pd.NaT, r))


def history_interval(
    median: float, mad_sigma: float, half_widths: np.ndarray
) -> tuple[float, float]:
    """The history's 95% interval: where a normal night of the series lands.

    Centre: the median of the history's values. Half-width: the larger of
    - 1.96 x the robust SD (1.4826 x MAD) of the history's values: the night-to-night
      swing, which already holds each night's measurement noise, at the 95% of tonight's
      own interval (the same footing); the `mad_threshold` test stands beside it;
    - the median of the history nights' own 95% half-widths (each relative to its value,
      times the median): a night is never known better than it was measured, so a short
      or lucky-quiet history (three identical values: MAD 0) cannot shrink the band below
      what one night resolves. It is the analogue of tonight's repeat CV raising the noise.
    History nights without intervals (older files) add no half-width; the MAD term alone
    remains.
    """
    spread = Z95 * mad_sigma
    halves = half_widths[np.isfinite(half_widths)]
    if len(halves):
        spread = max(spread, float(np.median(halves)) * abs(median))
    return median - spread, median + spread


def _judge(
    value: float,
    hist: np.ndarray,
    metric: str,
    cv: float,
    policy: RegressionPolicy,
    interval: tuple[float, float] | None = None,
    hist_halves: np.ndarray | None = None,
) -> dict[str, Any]:
    """The verdict of one number against its history, with every number behind it.

    `interval`: tonight's 95% (lo, hi) when the level has one; then the change counts
    only when it and the history's interval (history_interval, from `hist_halves`, the
    history nights' relative half-widths) separate in the direction of the change.
    """
    median = float(np.median(hist))
    mad_sigma = MAD_TO_SIGMA * float(np.median(np.abs(hist - median)))
    sigma = mad_sigma
    if not math.isnan(cv):
        sigma = max(sigma, abs(median) * cv)
    change = value / median - 1.0 if median else math.inf
    delta = value - median
    z = delta / sigma if sigma > 0 else (0.0 if delta == 0 else math.copysign(math.inf, delta))
    significant = abs(z) > policy.mad_threshold and abs(change) >= policy.min_change(metric)
    out = {"median": median, "noise": sigma, "change": change, "robust_z": z}
    if interval is not None:
        halves = hist_halves if hist_halves is not None else np.array([])
        h_lo, h_hi = history_interval(median, mad_sigma, halves)
        lo, hi = interval
        apart = hi < h_lo if delta < 0 else lo > h_hi
        significant = significant and apart
        out |= {"history_lo": h_lo, "history_hi": h_hi}
    worse = delta < 0 if HIGHER_IS_BETTER[metric] else delta > 0
    out["verdict"] = (REGRESSION if worse else IMPROVEMENT) if significant else OK
    return out


def judge_run(
    levels: pd.DataFrame,
    run_id: str,
    policy: RegressionPolicy | None = None,
    runs: dict[str, dict[str, Any]] | None = None,
    host_plans: dict[str, pd.DataFrame] | None = None,
) -> RegressionReport:
    """Judge `run_id` against the runs before it in `levels` (all runs of a store).

    `runs` maps run id -> runs-table row, used for failed variants and for
    code/config changes; optional (a notebook on the levels alone works too).
    `host_plans`: run id -> its hosts table, for fleet runs with a baseline plan.
    """
    policy = policy or RegressionPolicy()
    runs = runs or {}
    levels = series_rows(levels, host_plans or {})
    # another workload is another series: real prompts accept more than random ids
    workload = levels["workload"] if "workload" in levels.columns else None
    levels = levels.assign(
        workload=LEGACY_WORKLOAD if workload is None else workload.fillna(LEGACY_WORKLOAD)
    )
    if "policy_share" in policy.metrics:
        levels = with_policy_share(levels)
    order = run_order(levels)
    if run_id in order:
        earlier = order[: order.index(run_id)]
    elif runs.get(run_id):  # nothing measured (every variant failed): judge against all before
        started = pd.Timestamp(runs[run_id]["started_at"])
        firsts = levels.groupby("run_id")["started_at"].min()
        earlier = [r for r in order if pd.notna(firsts[r]) and firsts[r] < started]
    else:
        raise ValueError(f"run {run_id} has no level rows in this results store")
    history = levels[levels["run_id"].isin(earlier) & (levels["status"] == "ok")]
    tonight = levels[levels["run_id"] == run_id]
    rank = {r: i for i, r in enumerate(earlier)}
    rows: list[dict[str, Any]] = []
    hist_groups = {k: g for k, g in history.groupby(SERIES_KEY, dropna=False)}
    for key, now in tonight.groupby(SERIES_KEY, dropna=False):
        now_row = now.iloc[-1]
        past = hist_groups.get(key)
        if past is not None:
            past = past.assign(_rank=past["run_id"].map(rank)).sort_values("_rank")
            past = past.tail(policy.history_runs)
        base = dict(zip(SERIES_KEY, key, strict=True))
        n = 0 if past is None else len(past)
        env = _env_change(past, now) if past is not None else ""
        if now_row["status"] == "skipped":  # an adaptive search chose not to measure it
            continue
        if now_row["status"] != "ok":
            if n:
                rows.append(
                    {
                        **base,
                        "metric": "status",
                        "n_history": n,
                        "verdict": FAILED,
                        "error": now_row.get("error"),
                        "environment": env,
                    }
                )
            continue
        cv = now_row.get("output_throughput_cv", math.nan)
        cv = float(cv) if pd.notna(cv) and (now_row.get("repeats") or 1) > 1 else math.nan
        for metric in policy.metrics:
            value = now_row.get(metric)
            if value is None or pd.isna(value):
                continue
            known = past[past[metric].notna()] if past is not None else None
            hist = known[metric].to_numpy(float) if known is not None else np.array([])
            lo = _finite(now_row.get(f"{metric}_lo"))
            hi = _finite(now_row.get(f"{metric}_hi"))
            interval = (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None
            row = {
                **base,
                "metric": metric,
                "value": value,
                "value_lo": lo,
                "value_hi": hi,
                "n_history": len(hist),
                "environment": env,
            }
            if len(hist) == 0:
                rows.append({**row, "verdict": NEW})
            elif len(hist) < policy.min_history:
                rows.append({**row, "median": float(np.median(hist)), "verdict": INSUFFICIENT})
            else:
                metric_cv = cv if metric == "output_throughput" else math.nan
                halves = _relative_halves(known, metric) if interval is not None else None
                judged = _judge(value, hist, metric, metric_cv, policy, interval, halves)
                rows.append({**row, **judged})
    rows += _failed_variants(runs.get(run_id), tonight, history)
    columns = [
        *SERIES_KEY,
        "metric",
        "value",
        "value_lo",
        "value_hi",
        "median",
        "history_lo",
        "history_hi",
        "noise",
        "change",
        "robust_z",
        "n_history",
        "verdict",
        "error",
        "environment",
    ]
    verdicts = pd.DataFrame(rows, columns=columns)
    previous = earlier[-1] if earlier else None
    environment = {}
    if previous is not None:
        environment = environment_changes(levels[levels["run_id"] == previous], tonight)
        environment.update(run_changes(runs.get(previous), runs.get(run_id)))
    return RegressionReport(run_id, policy, verdicts, earlier[-policy.history_runs :], environment)


def series_rows(levels: pd.DataFrame, host_plans: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per run, the rows its answer uses. A fleet run's series are per GPU kind, not per
    host: a variant that lands on another host of the same kind tonight continues its
    series (its `target` here is the kind), and with a baseline plan its throughput is on
    the kind's reference's scale (baselines.kind_frames), as in the run's answer."""
    if "sweep_kind" not in levels.columns or not (levels["sweep_kind"] == FLEET_KIND).any():
        return answer_rows(levels)  # per run and variant, one target's (a dead host's left out)
    parts = []
    for run_id, rows in levels.groupby("run_id", sort=False):
        if not (rows["sweep_kind"] == FLEET_KIND).any():
            parts.append(answer_rows(rows))
            continue
        frames = kind_frames(rows, host_plans.get(str(run_id)))
        chosen = list(frames.values()) if frames else [answer_rows(rows)]
        kinds = [
            r.assign(target=[gpu_kind(n, c) or t for n, c, t in
                             zip(r["gpu_name"], r["gpu_count"], r["target"], strict=True)])
            for r in chosen
        ]  # fmt: skip
        parts += kinds
    return pd.concat(parts, ignore_index=True)


def _relative_halves(past: pd.DataFrame, metric: str) -> np.ndarray:
    """Each history night's 95% half-width over its value (NaN where it has none)."""
    lo_col, hi_col = f"{metric}_lo", f"{metric}_hi"
    if lo_col not in past.columns or hi_col not in past.columns:
        return np.full(len(past), np.nan)
    values = past[metric].to_numpy(float)
    lo = pd.to_numeric(past[lo_col], errors="coerce").to_numpy(float)
    hi = pd.to_numeric(past[hi_col], errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (hi - lo) / 2.0 / np.abs(values)


def with_policy_share(levels: pd.DataFrame) -> pd.DataFrame:
    """`levels` plus one row per level of each verified adaptive config, holding only
    `policy_share` (its throughput / the best a tier config reaches there). A run's own
    export is the series `exported-tiers`, whatever its tiers tonight; a hand-written tier
    config keeps its variant name."""
    extra = []
    keys = ["run_id", "shape"] if "shape" in levels.columns else ["run_id"]
    for _, rows in levels.groupby(keys, sort=False, dropna=False):  # a shape's own export
        checks = verify_adaptive(rows)
        if not checks:
            continue
        try:
            own = export_adaptive(rows).adaptive_spec().config_json()
        except PolicyExportRefused:
            own = None
        for check in checks:
            mine = rows[rows["variant"] == check.variant]
            name = EXPORTED if mine["adaptive_config"].iloc[0] == own else check.variant
            shares = check.levels.set_index("concurrency")["share_of_reachable"]
            for _, row in mine[mine["concurrency"].isin(shares.index)].iterrows():
                extra.append(
                    {
                        **{k: row[k] for k in (*SERIES_KEY, "run_id", "started_at", "status")},
                        "variant": name,
                        "repeats": 1,
                        "policy_share": float(shares[row["concurrency"]]),
                    }
                )
    levels = levels.assign(policy_share=np.nan)
    if not extra:
        return levels
    return pd.concat([levels, pd.DataFrame(extra)], ignore_index=True)


def _env_change(past: pd.DataFrame, now: pd.DataFrame) -> str:
    changes = environment_changes(past.tail(1), now)
    return _env_text(changes)


def _failed_variants(
    run: dict[str, Any] | None, tonight: pd.DataFrame, history: pd.DataFrame
) -> list[dict[str, Any]]:
    """Series of a variant that failed tonight before measuring them, but have a history."""
    if not run or not run.get("failed_variants"):
        return []
    errors = json.loads(run.get("variant_errors") or "{}")
    planned = json.loads(run.get("config") or "{}").get("load", {}).get("concurrency")
    measured = set(zip(tonight["variant"], tonight["concurrency"], strict=True))
    rows = []
    past = history[history["variant"].isin(run["failed_variants"])]
    if planned:
        past = past[past["concurrency"].isin(planned)]
    for key, group in past.groupby(SERIES_KEY, dropna=False):
        base = dict(zip(SERIES_KEY, key, strict=True))
        if (base["variant"], base["concurrency"]) in measured:
            continue
        rows.append(
            {
                **base,
                "metric": "status",
                "n_history": len(group),
                "verdict": FAILED,
                "error": errors.get(base["variant"], "variant failed"),
            }
        )
    return rows


def judge_stored_run(
    store: ResultsStore, run_id: str, policy: RegressionPolicy | None = None
) -> RegressionReport:
    """judge_run on a results store: reads every run's levels and the runs table."""
    levels = store.read_levels()
    runs = {r: store.read_run(r) for r in {*levels["run_id"].unique(), run_id}}
    fleet = levels.loc[levels["sweep_kind"] == FLEET_KIND, "run_id"].unique()
    plans = {str(r): store.read_host_plans(str(r)) for r in fleet}
    return judge_run(levels, run_id, policy, {k: v for k, v in runs.items() if v}, plans)


def verdict_markdown(report: RegressionReport) -> str:
    """The verdict for a Prefect artifact: headline, flagged rows, the environment change."""
    lines = [f"## Nightly regression: {report.headline()}", ""]
    flagged = pd.concat([report.regressions, report.improvements])
    if flagged.empty:
        lines.append(
            f"Every judged number is within noise of its history ({report.policy.mad_threshold:g}"
            " robust SDs, minimum change "
            f"{report.policy.min_relative_change:.0%} throughput / "
            f"{report.policy.min_relative_change_latency:.0%} latency, and where levels carry "
            "95% intervals, tonight's and the history's must separate)."
        )
    else:
        lines += [
            "Value: tonight's, with its 95% interval where the level has one; median: the "
            "history's, with the history's 95% interval when tonight's was compared with it.",
            "",
            "| verdict | variant | c | metric | value | median | change | noise units |",
            "|---|---|---:|---|---:|---:|---:|---:|",
        ]
        for r in flagged.to_dict("records"):
            if r["verdict"] == FAILED:
                lines.append(
                    f"| failed | {r['variant']} | {r['concurrency']} | status | "
                    f"{r['error']} | ok | | |"
                )
                continue
            now = _bounds(r.get("value_lo"), r.get("value_hi"))
            past = _bounds(r.get("history_lo"), r.get("history_hi"))
            lines.append(
                f"| {r['verdict']} | {r['variant']} | {r['concurrency']} | {r['metric']} | "
                f"{r['value']:,.4g}{now} | {r['median']:,.4g}{past} | {r['change']:+.1%} | "
                f"{r['robust_z']:+.1f} |"
            )
    if report.environment:
        lines += ["", "Changed since the previous run:", ""]
        lines += [f"- `{k}`: {a} → {b}" for k, (a, b) in report.environment.items()]
    judged = report.verdicts["verdict"].value_counts().to_dict()
    lines += ["", "Verdicts: " + ", ".join(f"{n} {v}" for v, n in sorted(judged.items()))]
    return "\n".join(lines) + "\n"
