"""What a fleet's baseline plan did, said beside the Hosts comparison: whose baseline each
host's variants were divided by, each host's calibration, and the other GPU kinds' answers."""

from __future__ import annotations

import math

import pandas as pd

from specsweep.analysis.answer import Answer
from specsweep.analysis.baselines import CALIBRATED, OWN, REFERENCE
from specsweep.report.tables import Table

_ROLE = {
    REFERENCE: "reference: measures its GPU kind's baseline",
    CALIBRATED: "calibrated",
    OWN: "its own baseline",
}


def _plans(answer: Answer) -> pd.DataFrame:
    plans = answer.host_plans
    if plans.empty:
        return plans
    return plans.sort_values("position") if "position" in plans.columns else plans


def _ratio(rec: dict) -> str:
    value = rec.get("calibration_ratio")
    if value is None or pd.isna(value):
        return "—"
    lo, hi = rec.get("calibration_lo"), rec.get("calibration_hi")
    text = f"{value - 1:+.1%}"
    if lo is not None and hi is not None and not (pd.isna(lo) or pd.isna(hi)):
        top = "inf" if math.isinf(hi) else f"{hi - 1:+.1%}"
        text += f" (95%: {lo - 1:+.1%} to {top})"
    return text


def _passed(rec: dict) -> bool | None:
    value = rec.get("passed")
    return None if value is None or pd.isna(value) else bool(value)


def _verdict(rec: dict) -> str:
    passed = _passed(rec)
    if rec["role"] == REFERENCE:
        return "reference"
    if rec["role"] == CALIBRATED:
        if passed:
            return f"passed: uses {rec['baseline_target']}'s baseline"
        return "pending: no verdict yet (its variants are left out)"
    return "failed: measures its own baseline" if passed is False else "own baseline"


def baseline_sentences(answer: Answer) -> list[str]:
    """The plan in words; empty without one (a single target, or fleet.baseline once)."""
    plans = _plans(answer)
    if plans.empty:
        return []
    mode = str(plans["mode"].iloc[0])
    said = [
        f"Baselines (fleet.baseline {mode}): every speedup is computed within one host, or "
        "between hosts whose calibration level agreed, never across GPU kinds."
    ]
    for rec in plans.to_dict("records"):
        host = rec["target"]
        if rec["role"] == REFERENCE:
            said.append(f"{host} measured the {rec.get('gpu_kind') or 'GPU kind'}'s baseline.")
        elif rec.get("calibration_ratio") is not None and not pd.isna(rec["calibration_ratio"]):
            said.append(
                f"{host}: calibration at c={int(rec['calibration_concurrency'])} "
                f"{_ratio(rec)} against its reference: {_verdict(rec)}."
            )
        else:
            said.append(f"{host}: {_verdict(rec)}.")
    if len(answer.by_gpu_kind) > 1:
        for kind, other in answer.by_gpu_kind.items():
            from specsweep.report.render import headline  # the one headline rule

            hosts = ", ".join(sorted({str(t) for t in other.levels["target"].dropna()}))
            said.append(f"On {kind} ({hosts}): {headline(other)}")
    return said


def calibration_table(answer: Answer) -> Table | None:
    """One row per fleet host: its GPU kind, role, whose baseline it used, its calibration."""
    plans = _plans(answer)
    if plans.empty:
        return None
    cols = [
        "host",
        "GPU kind",
        "role",
        "baseline used",
        "calibration level",
        "its baseline vs reference",
        "tolerance",
        "verdict",
    ]
    rows = []
    for rec in plans.to_dict("records"):
        level = rec.get("calibration_concurrency")
        shape = rec.get("calibration_shape")
        tol = rec.get("tolerance")
        rows.append(
            [
                str(rec["target"]),
                str(rec.get("gpu_kind") or "unknown"),
                _ROLE.get(rec["role"], rec["role"]),
                str(rec.get("baseline_target") or "—"),
                "—" if level is None or pd.isna(level) else f"c={int(level)} {shape or ''}".strip(),
                _ratio(rec),
                "—" if tol is None or pd.isna(tol) else f"±{tol:.0%}",
                _verdict(rec),
            ]
        )
    note = (
        "A calibrated host measures the baseline at one level; it passes when its throughput "
        "there is within the tolerance of its reference's and the ratio's 95% interval "
        "includes parity. Then its variants are divided by the reference's baseline; "
        "otherwise it measures its own and its variants are divided by that, then put on the "
        "reference's scale (their intervals carry both of its sides)."
    )
    return Table(
        "Baselines: one row per fleet host",
        cols,
        rows,
        [False, False, False, False, False, True, True, False],
        note=note,
    )
