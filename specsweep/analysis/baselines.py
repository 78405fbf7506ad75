"""A fleet's baselines: who measures one, how a host is checked, and what is compared.

Two hosts of one GPU kind can differ by a few percent (clocks, PCIe, NUMA): the size of
the effects an answer decides on. So a fleet never divides one host's throughput by
another host's baseline unless a calibration level showed the two agree
(`fleet.baseline`, docs/fleet.md):

- `initial_plan`: before anything runs, each host's role. per_gpu_kind: the first host of
  each GPU kind measures the kind's full baseline (reference); every other host of that
  kind measures the baseline at one calibration level (calibrated, pending); a host whose
  kind is unknown measures its own. every_host: each kind's first host is its reference,
  every other host measures its own full baseline. once: no plan (one baseline anywhere).
- `calibrate`: a calibrated host's baseline over its reference's at the calibration
  level, with its 95% interval. It passes when the ratio is within the tolerance and the
  interval includes parity; otherwise the host measures its own full baseline.
- `kind_frames`: per GPU kind, the rows its answer is built from. A variant measured on a
  host with its own baseline is put on the reference's scale with that host's own
  speedup (throughput x reference baseline / own baseline, cell by cell; the interval
  carries both of the host's sides), so every speedup in the answer is computed within
  one host or between hosts whose calibration agreed, never across GPU kinds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from specsweep.analysis.levels import chosen_targets
from specsweep.results.intervals import Interval, ratio
from specsweep.results.schema import SCHEMA_VERSION
from specsweep.results.store import fill_shape

REFERENCE, CALIBRATED, OWN = "reference", "calibrated", "own_baseline"
UNKNOWN_KIND = "unknown GPU"
# Throughput columns put on the reference's scale; latencies stay as their host measured.
SCALED = ["output_throughput", "request_throughput"]


def gpu_kind(gpu_name: object, gpu_count: object) -> str | None:
    """`1x NVIDIA H200`: what makes two hosts comparable (the driver is shown, not keyed)."""
    if gpu_name is None or (isinstance(gpu_name, float) and math.isnan(gpu_name)):
        return None
    count = "" if gpu_count is None or pd.isna(gpu_count) else f"{int(gpu_count)}x "
    return f"{count}{gpu_name}"


@dataclass(frozen=True)
class HostRole:
    role: str  # REFERENCE | CALIBRATED | OWN
    baseline_target: str  # whose baseline its variants use (a calibrated host: pending)


def initial_plan(mode: str, hosts: list[str], kinds: dict[str, str | None]) -> dict[str, HostRole]:
    """Each host's role before anything runs (`kinds`: host -> its GPU kind, None unknown);
    empty for `once`."""
    if mode == "once":
        return {}
    plan: dict[str, HostRole] = {}
    reference: dict[str, str] = {}
    for host in hosts:
        kind = kinds.get(host)
        if kind is None:  # nothing to calibrate against: its own baseline
            plan[host] = HostRole(OWN, host)
        elif kind not in reference:
            reference[kind] = host
            plan[host] = HostRole(REFERENCE, host)
        elif mode == "per_gpu_kind":
            plan[host] = HostRole(CALIBRATED, reference[kind])
        else:  # every_host
            plan[host] = HostRole(OWN, host)
    return plan


def plan_row(
    run_id: str,
    host: str,
    mode: str,
    role: HostRole,
    position: int,
    facts: dict[str, Any] | None = None,
    **calibration: Any,
) -> dict[str, Any]:
    """A hosts-table row (HOSTS_SCHEMA); `calibration`: the calibration_* columns, tolerance,
    passed, note."""
    facts = facts or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "target": host,
        "position": position,
        "mode": mode,
        "gpu_name": facts.get("gpu_name"),
        "gpu_count": facts.get("gpu_count"),
        "driver_version": facts.get("driver_version"),
        "gpu_kind": gpu_kind(facts.get("gpu_name"), facts.get("gpu_count")),
        "role": role.role,
        "baseline_target": role.baseline_target,
        "decided_at": datetime.now(UTC),
        **calibration,
    }


def _baseline_cells(levels: pd.DataFrame, target: str) -> pd.DataFrame:
    """A target's ok baseline rows, one per (shape, concurrency): the latest."""
    rows = levels[
        levels["is_baseline"].astype(bool)
        & (levels["target"] == target)
        & (levels["status"] == "ok")
    ]
    if "ended_at" in rows.columns:
        rows = rows.sort_values("ended_at")
    return rows.drop_duplicates(["shape", "concurrency"], keep="last").set_index(
        ["shape", "concurrency"]
    )


def _throughput(row: pd.Series, column: str = "output_throughput") -> Interval:
    return Interval(
        float(row[column]),
        float(row.get(f"{column}_lo", math.nan)),
        float(row.get(f"{column}_hi", math.nan)),
    )


def calibrate(
    levels: pd.DataFrame,
    host: str,
    reference: str,
    concurrency: int,
    shape: str,
    tolerance: float,
) -> dict[str, Any]:
    """The calibration columns of `host`'s plan row, from the run's level rows: its baseline
    over the reference's at (shape, concurrency), and whether it passed (None: a side is
    not measured yet)."""
    out: dict[str, Any] = {
        "calibration_concurrency": concurrency,
        "calibration_shape": shape,
        "tolerance": tolerance,
    }
    mine, theirs = _baseline_cells(levels, host), _baseline_cells(levels, reference)
    key = (shape, concurrency)
    if key not in mine.index or key not in theirs.index:
        missing = host if key not in mine.index else reference
        return out | {
            "passed": None,
            "note": f"no ok baseline level on {missing} at c={concurrency}",
        }
    r = ratio(_throughput(mine.loc[key]), _throughput(theirs.loc[key]))
    close = abs(r.value - 1.0) <= tolerance
    parity = not r.known or r.lo <= 1.0 <= r.hi
    passed = bool(close and parity)
    if passed:
        note = f"within {tolerance:.0%} of {reference}: its variants use {reference}'s baseline"
    else:
        why = f"{r.value - 1:+.1%}" + ("" if parity else ", 95% interval excludes parity")
        note = f"differs from {reference} ({why}): measures its own baseline"
    return out | {
        "calibration_ratio": r.value,
        "calibration_lo": r.lo,
        "calibration_hi": r.hi,
        "passed": passed,
        "note": note,
    }


def host_kinds(levels: pd.DataFrame, plans: pd.DataFrame) -> dict[str, str]:
    """host -> GPU kind: the plan's, else what the host's rows recorded."""
    kinds: dict[str, str] = {}
    for rec in plans.to_dict("records"):
        kind = rec.get("gpu_kind")
        if not kind or pd.isna(kind):
            rows = levels[levels["target"] == rec["target"]].dropna(subset=["gpu_name"])
            kind = (
                gpu_kind(rows["gpu_name"].iloc[0], rows["gpu_count"].iloc[0]) if len(rows) else None
            )
        kinds[rec["target"]] = kind or f"{UNKNOWN_KIND} ({rec['target']})"
    return kinds


def _baseline_of(rec: dict[str, Any], reference: str) -> str:
    """Whose baseline a host's variants use: the reference once its calibration passed."""
    if rec["role"] == CALIBRATED:
        return reference if rec.get("passed") is True else rec["target"]
    return rec["target"] if rec["role"] == OWN else reference


def kind_frames(levels: pd.DataFrame, plans: pd.DataFrame | None) -> dict[str, pd.DataFrame] | None:
    """GPU kind -> the rows its answer is built from (in the order of the kinds' first
    hosts); None without a plan (a single target, or fleet.baseline once).

    Each frame holds the reference's baseline rows and, per variant, the rows of one target
    of that kind (levels.chosen_targets among them), with `baseline_target` naming whose
    baseline they are compared with; rows compared with a host's own baseline are scaled
    to the reference's (see the module docstring); a cell without that baseline is left out.
    """
    if plans is None or plans.empty:
        return None
    levels = fill_shape(levels if "shape" in levels.columns else levels.assign(shape=None))
    plans = plans.sort_values("position") if "position" in plans.columns else plans
    kinds = host_kinds(levels, plans)
    records = {r["target"]: r for r in plans.to_dict("records")}
    frames: dict[str, pd.DataFrame] = {}
    for kind in dict.fromkeys(kinds[t] for t in records):
        hosts = [t for t in records if kinds[t] == kind]
        refs = [t for t in hosts if records[t]["role"] == REFERENCE] or [
            t for t in hosts if records[t]["role"] == OWN
        ]
        if not refs:
            continue
        reference = refs[0]
        base = levels[levels["is_baseline"].astype(bool) & (levels["target"] == reference)]
        rest = levels[~levels["is_baseline"].astype(bool) & levels["target"].isin(hosts)]
        if not rest.empty:
            keys = ["variant", "target"]
            chosen = pd.MultiIndex.from_frame(chosen_targets(rest)[keys])
            rest = rest[pd.MultiIndex.from_frame(rest[keys]).isin(chosen)]
        parts = [base.assign(baseline_target=reference)]
        ref_cells = _baseline_cells(levels, reference)
        for target, rows in rest.groupby("target", sort=False):
            own = _baseline_of(records[target], reference)
            rows = rows.assign(baseline_target=own)
            if own != reference:
                rows = _rescale(rows, _baseline_cells(levels, own), ref_cells)
            parts.append(rows)
        frames[kind] = pd.concat(parts, ignore_index=True)
    return frames or None


def _rescale(rows: pd.DataFrame, own: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """Rows on the reference's scale: their speedup over their own host's baseline times the
    reference's baseline, per cell; cells either baseline lacks are dropped (their
    measurement stays stored, and in the Hosts section)."""
    out = []
    for _, row in rows.iterrows():
        key = (row["shape"], row["concurrency"])
        if row["status"] != "ok":
            out.append(row)
            continue
        if key not in own.index or key not in ref.index:
            continue
        row = row.copy()
        for col in SCALED:
            if col not in row.index or pd.isna(row[col]):
                continue
            own_base = _throughput(own.loc[key], col)
            speedup = ratio(_throughput(row, col), own_base)  # within its host
            scale = float(ref.loc[key][col])
            row[col] = speedup.value * scale
            if f"{col}_lo" in row.index:
                row[f"{col}_lo"] = speedup.lo * scale
                row[f"{col}_hi"] = speedup.hi * scale
        out.append(row)
    return pd.DataFrame(out, columns=rows.columns) if out else rows.iloc[0:0]
