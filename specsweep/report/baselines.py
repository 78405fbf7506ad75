"""What a fleet's baseline plan did, said beside the Hosts comparison: whose baseline each
host's variants were divided by and each host's calibration (the sentences and the table)."""

from __future__ import annotations

import math

import pandas as pd

from specsweep.analysis.answer import RunAnswer
from specsweep.analysis.baselines import CALIBRATED, OWN, REFERENCE

ROLE_TEXT = {
    REFERENCE: "reference: measures its GPU kind's baseline",
    CALIBRATED: "calibrated",
    OWN: "its own baseline",
}


def plans_in_order(answer: RunAnswer) -> pd.DataFrame:
    plans = answer.host_plans
    if plans.empty:
        return plans
    return plans.sort_values("position") if "position" in plans.columns else plans


def calibration_text(rec: dict) -> str:
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


def verdict_text(rec: dict) -> str:
    passed = _passed(rec)
    if rec["role"] == REFERENCE:
        return "reference"
    if rec["role"] == CALIBRATED:
        if passed:
            return f"passed: uses {rec['baseline_target']}'s baseline"
        return "pending: no verdict yet (its variants are left out)"
    return "failed: measures its own baseline" if passed is False else "own baseline"


def baseline_sentences(answer: RunAnswer) -> list[str]:
    """The plan in words; empty without one (a single target, or fleet.baseline once)."""
    plans = plans_in_order(answer)
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
                f"{calibration_text(rec)} against its reference: {verdict_text(rec)}."
            )
        else:
            said.append(f"{host}: {verdict_text(rec)}.")
    return said
