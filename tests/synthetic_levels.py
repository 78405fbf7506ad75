"""Synthetic level rows with known answers, written through the real results store.

Curves are chosen so the expected pivot, policy and verdicts can be computed
by hand: the speculative/baseline throughput ratio is linear in log2(c).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pyarrow as pa

from specsweep.results.rows import steps_share_json
from specsweep.results.schema import LEVELS_SCHEMA, SCHEMA_VERSION
from specsweep.results.store import ResultsStore

LEVELS = [1, 2, 4, 8, 16, 32]
SPEC = "eagle3-s2-k1-d3"
T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


def baseline_tput(c: int) -> float:
    return 500.0 * c**0.8


def level_row(
    run_id: str,
    variant: str,
    concurrency: int,
    throughput: float,
    *,
    started_at: datetime = T0,
    target: str = "gpu-host",
    model_path: str = "meta/llama",
    input_len: int = 128,
    output_len: int = 64,
    ttft_p99: float = 20.0,
    itl_p99: float = 5.0,
    repeats: int | None = None,
    cv: float | None = None,
    status: str = "ok",
    sglang_version: str = "0.5.9",
    accept_length: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    baseline = variant == "baseline"
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "sweep_kind": "matrix_sweep",
        "sweep_name": "synthetic",
        "variant": variant,
        "is_baseline": baseline,
        "target": target,
        "hostname": "host",
        "backend": "sglang",
        "simulated": False,
        "sglang_version": sglang_version,
        "gpu_name": "NVIDIA H200",
        "gpu_count": 1,
        "model_path": model_path,
        "algorithm": None if baseline else "EAGLE3",
        "num_steps": None if baseline else 2,
        "topk": None if baseline else 1,
        "num_draft_tokens": None if baseline else 3,
        "spec_v2": False,
        "env": "{}",
        "extra_args": "[]",
        "server_command": f"python -m sglang.launch_server --model-path {model_path}",
        "concurrency": concurrency,
        "input_len": input_len,
        "output_len": output_len,
        "num_requests": 4 * concurrency,
        "started_at": started_at + timedelta(seconds=concurrency),
        "ended_at": started_at + timedelta(seconds=concurrency + 1),
        "completed": 4 * concurrency,
        "failed": 0,
        "output_throughput": throughput,
        "ttft_ms_p50": ttft_p99 / 2,
        "ttft_ms_p99": ttft_p99,
        "itl_ms_p50": itl_p99 / 2,
        "itl_ms_p99": itl_p99,
        "accept_length": None if baseline else (accept_length or 2.5),
        "repeats": repeats,
        "output_throughput_cv": cv,
        "status": status,
        "error": None if status == "ok" else "too many failed requests (3/8)",
        **extra,
    }


def sweep_rows(
    run_id: str,
    ratio: dict[int, float] | None = None,
    levels: list[int] = LEVELS,
    **kw: Any,
) -> list[dict[str, Any]]:
    """Baseline plus SPEC, whose ratio to the baseline is 1.45 - 0.1*log2(c) unless given:
    it crosses 1 at log2 c = 4.5, i.e. c = 2**4.5 ≈ 22.6."""
    rows = []
    for c in levels:
        r = ratio[c] if ratio else 1.45 - 0.1 * math.log2(c)
        rows.append(level_row(run_id, "baseline", c, baseline_tput(c), **kw))
        rows.append(level_row(run_id, SPEC, c, baseline_tput(c) * r, **kw))
    return rows


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as the store would read them back (every column, schema types)."""
    full = [{name: row.get(name) for name in LEVELS_SCHEMA.names} for row in rows]
    return pa.Table.from_pylist(full, LEVELS_SCHEMA).to_pandas()


def write(store: ResultsStore, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        store.write_level(row)


def night(i: int) -> tuple[str, datetime]:
    """Run id and start of synthetic night i (time-sortable, a day apart)."""
    start = T0 + timedelta(days=i)
    return f"{start:%Y%m%dT%H%M%SZ}-n{i:04d}", start


def on_target(
    rows: list[dict[str, Any]],
    target: str,
    factor: float = 1.0,
    *,
    later: timedelta = timedelta(0),
    **facts: Any,
) -> list[dict[str, Any]]:
    """Copies of `rows` as measured on another fleet target: throughput x factor, `later` later,
    with its identity facts (gpu_host, gpu_name, driver_version, gpu_uuids...) set."""
    out = []
    for row in rows:
        copy = {**row, "target": target, "gpu_host": f"{target}.lan", **facts}
        copy["output_throughput"] = row["output_throughput"] * factor
        copy["started_at"] = row["started_at"] + later
        copy["ended_at"] = row["ended_at"] + later
        out.append(copy)
    return out


# ---- adaptive speculation: static chains, trees and adaptive variants -------------------

DRAFT = "draft/eagle3"
ADAPTIVE_COLUMNS = ("adaptive", "adaptive_config", "adaptive_steps_share")


def chain_label(steps: int, topk: int = 1, draft_tokens: int | None = None) -> str:
    return f"eagle3-s{steps}-k{topk}-d{draft_tokens or steps + 1}"


def chain_row(
    run_id: str,
    steps: int,
    concurrency: int,
    throughput: float,
    *,
    topk: int = 1,
    draft_tokens: int | None = None,
    variant: str | None = None,
    draft_model_path: str = DRAFT,
    **kw: Any,
) -> dict[str, Any]:
    """A static EAGLE3 variant (a chain with topk 1, else a tree) with `steps` draft steps."""
    tokens = draft_tokens or (steps + 1 if topk == 1 else 2 * steps + 2)
    return level_row(
        run_id,
        variant or chain_label(steps, topk, tokens),
        concurrency,
        throughput,
        num_steps=steps,
        topk=topk,
        num_draft_tokens=tokens,
        draft_model_path=draft_model_path,
        **kw,
    )


def static_rows(
    run_id: str,
    ratios: dict[int, dict[int, float]],
    levels: list[int] | None = None,
    **kw: Any,
) -> list[dict[str, Any]]:
    """The baseline (baseline_tput) plus one chain per step count s whose throughput is
    baseline_tput(c) * ratios[s][c], at the levels each ratio gives (or `levels`)."""
    rows = []
    every = sorted({c for r in ratios.values() for c in r}) if levels is None else levels
    for c in every:
        rows.append(level_row(run_id, "baseline", c, baseline_tput(c), **kw))
        for steps, ratio in sorted(ratios.items()):
            if c in ratio:
                rows.append(chain_row(run_id, steps, c, baseline_tput(c) * ratio[c], **kw))
    return rows


def adaptive_row(
    run_id: str,
    variant: str,
    concurrency: int,
    throughput: float,
    *,
    tiers: dict[int, list[int]] | None,
    steps_share: dict[int, float] | None = None,
    draft_model_path: str = DRAFT,
    **kw: Any,
) -> dict[str, Any]:
    """A level of an adaptive variant: `tiers` None for sglang's default tiers; its config
    and step shares as the results store records them (AdaptiveSpec.config_json)."""
    from specsweep.config.adaptive import AdaptiveSpec

    spec = AdaptiveSpec(tiers=tiers)
    steps = spec.initial_steps
    share = None if steps_share is None else steps_share_json(steps_share)
    return level_row(
        run_id,
        variant,
        concurrency,
        throughput,
        num_steps=steps,
        topk=1,
        num_draft_tokens=steps + 1,
        draft_model_path=draft_model_path,
        adaptive=True,
        adaptive_config=spec.config_json(),
        adaptive_steps_share=share,
        **kw,
    )


def adaptive_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """frame(rows) with the adaptive columns from the rows, whether or not the schema has
    them yet (rows without them read null, as older files do)."""
    out = frame(rows)
    for col in ADAPTIVE_COLUMNS:
        if col not in out.columns:
            out[col] = pd.Series([row.get(col) for row in rows], index=out.index, dtype=object)
    return out
