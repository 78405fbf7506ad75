"""Compare two runs level by level: how much each number moved, and whether that is noise.

Throughput noise comes from the repeats: a level measured n times with a
coefficient of variation cv has a mean whose relative standard error is
cv / sqrt(n). The change between runs A and B is "significant" when it
exceeds `z` times the combined standard error. A level measured once carries
no noise estimate; when only one of the two runs has repeats, its noise
stands for both, and when neither has, the change is reported as "noise
unknown", never called significant or not.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from specsweep.analysis.levels import LATENCY_COLUMNS, answer_rows, ok_levels, variant_order

# Columns that describe where and how a number was measured, in the order a reader scans them.
ENVIRONMENT_COLUMNS = [
    "sglang_version",
    "gpu_name",
    "gpu_count",
    "driver_version",  # judged when the levels table records it
    "hostname",
    "gpu_host",  # the machine the server ran on; differs between fleet hosts
    "gpu_uuids",  # which cards measured (empty for the simulator and older files)
    "simulated",
    "model_path",
    "draft_model_path",
    "tp",
    "max_running_requests",
    "extra_args",
    "env",
    "input_len",
    "output_len",
]

_KEY = ["variant", "concurrency"]


def _per_level(levels: pd.DataFrame) -> pd.DataFrame:
    ok = ok_levels(levels)
    cols = ["output_throughput", "output_throughput_cv", "repeats", *LATENCY_COLUMNS]
    return ok.groupby(_KEY)[cols].mean()


def mean_noise(cv: pd.Series, repeats: pd.Series) -> pd.Series:
    """Relative standard error of a level's mean throughput; NaN with a single pass."""
    n = repeats.fillna(1)
    return (cv / np.sqrt(n)).where(n > 1)


def compare_runs(levels_a: pd.DataFrame, levels_b: pd.DataFrame, z: float = 2.0) -> pd.DataFrame:
    """Per (variant, concurrency) measured in both runs: B relative to A.

    Columns: variant, concurrency, throughput_a, throughput_b, change (B/A - 1),
    noise (relative standard error of the change; NaN = unknown), verdict
    ('faster', 'slower', 'within noise' or 'noise unknown'), and the relative
    change of each latency column (`<col>_change`, positive = slower).
    """
    a, b = _per_level(levels_a), _per_level(levels_b)
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="inner")
    out = pd.DataFrame(index=both.index)
    out["throughput_a"] = both["output_throughput_a"]
    out["throughput_b"] = both["output_throughput_b"]
    out["change"] = out["throughput_b"] / out["throughput_a"] - 1.0
    se_a = mean_noise(both["output_throughput_cv_a"], both["repeats_a"])
    se_b = mean_noise(both["output_throughput_cv_b"], both["repeats_b"])
    # One run with repeats and one without: its noise stands for both (same server, same load).
    out["noise"] = np.hypot(se_a.fillna(se_b), se_b.fillna(se_a))
    out["verdict"] = [
        _verdict(ch, no, z) for ch, no in zip(out["change"], out["noise"], strict=True)
    ]
    for col in LATENCY_COLUMNS:
        out[f"{col}_change"] = both[f"{col}_b"] / both[f"{col}_a"] - 1.0
    out = out.reset_index()
    rank = {v: i for i, v in enumerate(variant_order(ok_levels(pd.concat([levels_a, levels_b]))))}
    out = out.assign(_rank=out["variant"].map(rank)).sort_values(["_rank", "concurrency"])
    return out.drop(columns="_rank").reset_index(drop=True)


def _verdict(change: float, noise: float, z: float) -> str:
    if math.isnan(noise):
        return "noise unknown"
    if abs(change) <= z * noise:
        return "within noise"
    return "faster" if change > 0 else "slower"


def _describe(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return str(value)


def environment_changes(before: pd.DataFrame, after: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """Environment columns whose values differ between two sets of level rows.

    Returns column -> (before, after), each side the distinct values joined by
    ', '. The `env` JSON is compared key by key, so the message names the
    variable that changed rather than the whole object. Only the rows an answer
    uses count (one target per variant, see levels.answer_rows).
    """
    before, after = answer_rows(before), answer_rows(after)
    changes: dict[str, tuple[str, str]] = {}
    for col in ENVIRONMENT_COLUMNS:
        if col not in before.columns or col not in after.columns:
            continue
        if col == "env":
            changes.update(_env_changes(before[col], after[col]))
            continue
        old = sorted({_describe(v) for v in before[col]})
        new = sorted({_describe(v) for v in after[col]})
        if old != new:
            changes[col] = (", ".join(old), ", ".join(new))
    return changes


def _env_changes(before: pd.Series, after: pd.Series) -> dict[str, tuple[str, str]]:
    def merged(col: pd.Series) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for text in col.dropna():
            for key, value in json.loads(text).items():
                out.setdefault(key, set()).add(str(value))
        return out

    old, new = merged(before), merged(after)
    return {
        f"env.{key}": (
            ", ".join(sorted(old.get(key, {"unset"}))),
            ", ".join(sorted(new.get(key, {"unset"}))),
        )
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    }


def run_changes(run_a: dict | None, run_b: dict | None) -> dict[str, tuple[str, str]]:
    """What changed in the runs table between two runs: code revision and config keys."""
    if not run_a or not run_b:
        return {}
    changes = {
        col: (_describe(run_a.get(col)), _describe(run_b.get(col)))
        for col in ("specsweep_version", "git_revision", "target")
        if run_a.get(col) != run_b.get(col)
    }
    flat_a = _flatten(json.loads(run_a.get("config") or "{}"))
    flat_b = _flatten(json.loads(run_b.get("config") or "{}"))
    for key in sorted(set(flat_a) | set(flat_b)):
        if key in ("results_dir", "name") or flat_a.get(key) == flat_b.get(key):
            continue
        changes[f"config.{key}"] = (_describe(flat_a.get(key)), _describe(flat_b.get(key)))
    return changes


def _flatten(data: object, prefix: str = "") -> dict[str, str]:
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): json.dumps(data, sort_keys=True)}
