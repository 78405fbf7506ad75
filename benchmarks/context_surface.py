"""Does speculation's pivot move up with context length, and what does a load shape cost?

Issue 18, measured. On the simulator (``backend: simulator``, local target, profile
``default`` unless --profile) the script runs a step sweep (the baseline and EAGLE-3
chains of --num-steps, topk 1, ``max_running_requests`` --mrr so every level up to 128 is
a real batch) through the real flow (``specsweep.flows.matrix_sweep.matrix_sweep`` in this process,
on Prefect's ephemeral API) twice, each into its own results directory under --out:

- ``one-shape``: the first shape alone (input 512, output 256 by default);
- ``all-shapes``: every shape (inputs 512, 4096 and 32768 tokens, output 256) on the same
  server launches (``load.shapes``): each variant's server measures every shape over
  every concurrency level (1 2 4 ... 128) before it is torn down.

Prompts are random token ids (the simulator's default), one warmup request per stream,
one pass per level of max(--min-requests, --requests-per-stream x c) requests.

It reports:

1. The pivot per shape, measured: each chain's pivot from the answer's per-shape pivots
   (``analyze_run(...).cell(shape=shape).pivots``: kind, crossing and its 95% range), the
   "best chain" pivot (at each level the best of the chains against the baseline, the
   edge of the surface where the best variant turns into the baseline) and the surface
   itself (best variant and its speedup per shape x concurrency). Beside it, in its own
   table and labelled as such, the model's prediction: the simulator's own
   ``perf_model.pivot_concurrency`` at the shape's mean decode context
   (``decode_context(input_len, output_len)`` = input + output / 2), a steady-state decode
   figure that leaves prefill out.
2. The extra measuring time of a shape: per run the launches (phase records,
   ``store.read_phase_files``: one per variant whatever the number of shapes), the
   server-held seconds (sum of ``held_until_unix - held_from_unix``), launch-to-ready
   seconds (``launch_to_ready_s``: the overhead a shape does not repeat), the benchmark
   seconds (``benchmark_s``: levels and their warmups) and the measuring seconds per
   shape (sum of the level rows' ``ended_at - started_at``; warmups excluded). Wall
   seconds run at the time scale (``SPECSWEEP_SIM_TIME_SCALE``): measuring seconds /
   scale are the simulated (time-scale-1) seconds, which are set against the seeds'
   real launch cost (8.5 min per launch on the seeds' box). The simulator's launch is
   not simulated at scale (0.3 s load + 0.3 s warmup, wall), so only the measuring
   seconds are converted.

Checks (PASS/FAIL, exit 1 on a FAIL):

- launches: the one-shape and the all-shapes run launch the same servers (one per
  variant);
- pivot up: the best chain's pivot at the last shape (32768) is higher than at the first
  (512), or speculation never loses up to the top level there while it does at the first:
  the whole range of the last shape's pivot (95% range, or the bracket of an inconclusive
  one, whose ends are levels it lies strictly between) lies above the first's, touching
  allowed (each chain's comparison is listed, for information);
- model direction: for every chain and for the best chain, the measured pivot moves from
  the first to the last shape in the direction the model's pivot_concurrency moves (a
  pivot at or above the top level counts as "never in the measured range", so the model's
  181 and "never up to 1024" both read as above 128).

Position of a pivot for the comparisons: ``crosses`` its interpolated concurrency,
``never`` above the top level (inf), ``always`` 0, ``inconclusive`` where the ratio itself
first crosses 1 downwards inside its bracket (else the bracket's geometric middle, the
lowest level / twice the top level standing in for an open side), ``below_at_low`` not
comparable (a FAIL where a check needs it).

Time: ``--stream-interval 8`` on every server and time compressed (simbench.time_scale)
until a baseline decode step at c=1 lasts --min-step-ms (0.3) ms of wall time, or the
baseline at the top level streams --rate chunks per second. The same scale for both
runs. Throughputs are printed in simulated tok/s (measured x scale).

    .venv/bin/python benchmarks/context_surface.py --out /tmp/cs     # ~15 min, 2 CPUs
    .venv/bin/python benchmarks/context_surface.py --quick           # 1 4 16 64, output 64
    .venv/bin/python benchmarks/context_surface.py --out /tmp/cs --analyse-only  # re-print

Measured on 2026-12-02, 2 CPUs, time scale 0.03, specsweep at 1e8dc30 (838 s wall; the
checks re-printed with --analyse-only after touching bracket ends were allowed):

    shape           best chain's pivot, measured                  model (pivot_concurrency)
    in512-out256    inconclusive 2-8, ratio crosses c~4.9 (s3)    c=6
    in4096-out256   inconclusive 2-8, ratio crosses c~5.3 (s3)    c=6
    in32768-out256  inconclusive 8-?, ratio crosses c~17 (s3)     never up to 1024

    launches 4 and 4; server-held 123 s (one shape) vs 680 s (three); launch-to-ready
    5.4 vs 4.6 s; measuring per shape 84 / 111 / 324 s wall = 2,813 / 3,685 / 10,795 s
    simulated, i.e. per server 11.7 / 15.4 / 45.0 min against the seeds' 8.5 min launch.

The measured pivot moves up with context, far less than the model says: pivot_concurrency
is steady-state decode, while the measurement pays a prefill step per request that stops
every decode (1.3 s per 32k prompt, 15% more with a draft model), so at 32768 s3 reads
0.96x at c=128 where the model predicts 1.07x. An earlier run of the same command (at
5c112d7 plus others' uncommitted changes) read the s3 pivot at c~4.95 (95% 4.24-5.72) at
512 and c~48 (bracket 8-?) at 32768. Not modelled by the simulator: the KV pool; at
32768 tokens 128 running requests hold 10.4x max_total_num_tokens (the log's token usage
10.40), which a real server would not admit (about 12 fit).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # simbench.py beside this file
sys.path.insert(0, str(ROOT))

from simbench import code_state, free_port, run_sweep, say, time_scale  # noqa: E402

from specsweep.config.file import parse_config  # noqa: E402
from specsweep.config.load import shape_label  # noqa: E402
from specsweep.sim.perf_model import (  # noqa: E402
    SpecConfig,
    decode_context,
    pivot_concurrency,
    prefill_step_ms,
    steady_state_throughput,
)
from specsweep.sim.profiles import get_profile  # noqa: E402

DRAFT = "sim/eagle3-draft"
MRR = 128
LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]
QUICK_LEVELS = [1, 4, 16, 64]
SHAPES = [512, 4096, 32768]
STEPS = [1, 3, 5]
RUNS = ("one-shape", "all-shapes")
SEEDS_LAUNCH_S = 8.5 * 60  # the seeds' minutes of launch per server on a real box
MODEL_LIMIT = 1024  # pivot_concurrency's search limit


# ---- the sweep --------------------------------------------------------------------------


def chain_name(steps: int) -> str:
    return f"s{steps}k1d{steps + 1}"


def short(variant: str | None) -> str:
    if variant is None or (isinstance(variant, float) and math.isnan(variant)):
        return "-"
    parts = str(variant).split("-")  # eagle3-s2-k1-d3
    return "".join(parts[1:]) if len(parts) == 4 and parts[0] == "eagle3" else str(variant)


def sweep_data(
    run: str, args: argparse.Namespace, out: Path, scale: float, inputs: list[int]
) -> dict[str, Any]:
    home = out / run
    name = f"context-surface-{run}"
    return {
        "name": name,
        "target": {"kind": "local", "name": name, "workdir": str(home)},
        "results_dir": str(home / "results"),
        "server": {
            "backend": "simulator",
            "model_path": f"sim/{args.profile}",
            "port": free_port(),
            "max_running_requests": args.mrr,
            "extra_args": ["--stream-interval", str(args.stream_interval)],
            "startup_timeout_s": 60,
            "env": {
                "SPECSWEEP_SIM_PROFILE": args.profile,
                "SPECSWEEP_SIM_TIME_SCALE": str(scale),
                "SPECSWEEP_SIM_LOAD_SECONDS": "0.3",
                "SPECSWEEP_SIM_WARMUP_SECONDS": "0.3",
                "SPECSWEEP_SIM_SEED": "1",
            },
        },
        "step_sweep": {
            "algorithm": "EAGLE3",
            "draft_model_path": DRAFT,
            "num_steps": args.num_steps,
            "topk": 1,
        },
        "load": {
            "concurrency": args.levels,
            "shapes": [{"input_len": i, "output_len": args.output_len} for i in inputs],
            "prompts": "random",
            "requests_per_stream": args.requests_per_stream,
            "min_requests": args.min_requests,
            "warmup_requests": -1,
            "repeats": 1,
            "seed": 0,
        },
    }


# ---- analysis ---------------------------------------------------------------------------


@dataclass
class Pos:
    """A pivot's position on the concurrency axis, for ordering shapes."""

    kind: str
    value: float | None  # None: not comparable (below_at_low, no data)
    text: str
    lo: float | None = None  # the range the pivot may lie in (95% range, bracket)
    hi: float | None = None


@dataclass
class RunResult:
    run: str
    scale: float
    shapes: list[str]
    wall_s: float
    run_id: str | None
    failure: str | None = None
    code: str = ""
    answer: Any = None
    launches: int = 0
    launched: list[str] = field(default_factory=list)
    held_s: float = 0.0
    launch_s: float = 0.0
    benchmark_s: float = 0.0
    measuring_s: dict[str, float] = field(default_factory=dict)  # shape -> sum of levels
    cells: dict[str, int] = field(default_factory=dict)  # shape -> ok level rows
    failed_cells: int = 0

    def per_shape(self) -> dict[str, Any]:
        if self.answer is None:
            return {}
        cells = self.answer.cells  # one GPU kind: one cell per shape
        return {c.shape or self.shapes[0]: c for c in cells}


def analyse(meta: dict[str, Any], results_dir: Path) -> RunResult:
    from specsweep.analysis.answer import analyze_run
    from specsweep.results.store import ResultsStore

    r = RunResult(
        meta["run"], meta["scale"], meta["shapes"], meta["wall_s"], meta["run_id"],
        meta.get("failure"), meta.get("code", ""),
    )  # fmt: skip
    if r.run_id is None:
        return r
    store = ResultsStore(results_dir)
    files = store.read_phase_files(r.run_id)
    r.launched = sorted(variant for variant, _, _ in files)
    r.launches = len(files)
    for _, _, ph in files:
        if "held_from_unix" in ph and "held_until_unix" in ph:
            r.held_s += ph["held_until_unix"] - ph["held_from_unix"]
        r.launch_s += ph.get("launch_to_ready_s", 0.0)
        r.benchmark_s += ph.get("benchmark_s", 0.0)
    levels = store.read_levels(r.run_id)
    if not levels.empty:
        shape_col = levels["shape"].fillna(r.shapes[0]) if "shape" in levels else r.shapes[0]
        levels = levels.assign(_shape=shape_col)
        span = pd.to_datetime(levels["ended_at"], utc=True) - pd.to_datetime(
            levels["started_at"], utc=True
        )
        levels = levels.assign(_s=span.dt.total_seconds())
        order = {s: i for i, s in enumerate(r.shapes)}
        for shape, g in sorted(levels.groupby("_shape"), key=lambda x: order.get(x[0], 99)):
            r.measuring_s[str(shape)] = float(g["_s"].sum())
            r.cells[str(shape)] = int((g["status"] == "ok").sum())
        r.failed_cells = int((levels["status"] != "ok").sum())
    try:
        r.answer = analyze_run(store, r.run_id)
    except LookupError as exc:
        r.failure = (r.failure + "; " if r.failure else "") + str(exc)
    return r


def best_chain_pivot(answer: Any) -> Any:
    """The pivot of the best chain per level: at each level the fastest speculative variant
    against the baseline, with the ratio's 95% interval (as the answer's own pivots)."""
    from specsweep.analysis.levels import baseline_name, cell, interval_tables
    from specsweep.analysis.pivot import pivot_for
    from specsweep.results.intervals import ratio

    tp = answer.throughput
    base = baseline_name(answer.levels)
    if tp.empty or base is None or base not in tp.columns:
        return None
    lo, hi = interval_tables(answer.levels, "output_throughput")
    specs = [v for v in tp.columns if v != base]
    vals, los, his = {}, {}, {}
    for c in tp.index:
        row = tp.loc[c, specs].dropna()
        if row.empty or pd.isna(tp.at[c, base]):
            continue
        best = str(row.idxmax())
        r = ratio(cell(tp, lo, hi, c, best), cell(tp, lo, hi, c, base))
        vals[c], los[c], his[c] = r.value, r.lo, r.hi
    if not vals:
        return None
    return pivot_for(pd.Series(vals), "best chain", pd.Series(los), pd.Series(his))


def pivot_pos(p: Any, levels: list[int]) -> Pos:
    if p is None:
        return Pos("-", None, "-")
    if p.kind == "crosses":
        c = float(p.concurrency)
        known = p.low is not None and p.high is not None
        rng = f" (95% {p.low:.3g}-{p.high:.3g})" if known else ""
        more = f", {len(p.crossings)} crossings" if p.multiple_crossings else ""
        lo, hi = (float(p.low), float(p.high)) if known else (c, c)
        return Pos("crosses", c, f"crosses c≈{c:.3g}{rng}{more}", lo, hi)
    if p.kind == "never":
        return Pos("never", math.inf, f"never (wins up to c={max(levels)})", max(levels), math.inf)
    if p.kind == "always":
        return Pos("always", 0.0, "always (loses from c=1)", 0.0, min(levels))
    if p.kind == "inconclusive":
        # the bracket; the point: where the ratio itself first crosses 1 downwards inside
        # it, else the bracket's geometric middle (the lowest level / twice the top level
        # standing in for an open side)
        lo = float(p.low) if p.low is not None else 0.0
        hi = float(p.high) if p.high is not None else math.inf
        downs = [c for c, d in p.crossings if d == "down" and lo <= c <= hi]
        if downs:
            value, how = float(downs[0]), f"ratio crosses c≈{downs[0]:.3g}"
        else:
            low = p.low if p.low is not None else float(min(levels))
            high = p.high if p.high is not None else 2.0 * max(levels)
            value, how = math.sqrt(low * high), "no ratio crossing"
        side = f"{fmt(p.low, 'g').replace('-', '?')} to {fmt(p.high, 'g').replace('-', '?')}"
        text = f"inconclusive (c {side}, unsure at {list(p.unsure)}; {how})"
        return Pos("inconclusive", value, text, lo, hi)
    return Pos(p.kind, None, p.kind)


def separate(a: Pos, b: Pos) -> bool:
    """b's whole range lies above a's. Touching ends count: an inconclusive pivot's bracket
    ends are measured levels it lies strictly between (sure above at the low end, sure
    below at the high end), `never` lies above the top level, and two 95% ranges of
    crossings ending on the same point are a measure-zero case."""
    if None in (a.lo, a.hi, b.lo, b.hi) or a.kind == "never":
        return False
    return b.lo >= a.hi


def model_pos(pivot: int | None, levels: list[int]) -> Pos:
    """pivot_concurrency's answer as a position: beyond the top level reads as never."""
    if pivot is None:
        return Pos("never", math.inf, f"never (wins up to c={MODEL_LIMIT})")
    if pivot > max(levels):
        return Pos("never", math.inf, f"c={pivot} (above the top level {max(levels)})")
    if pivot <= 1:
        return Pos("always", 0.0, f"c={pivot} (loses from c=1)")
    return Pos("crosses", float(pivot), f"c={pivot}")


def model_predictions(
    profile_name: str, inputs: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    """The simulator's own prediction per shape (steady-state decode, prefill ignored)."""
    p = get_profile(profile_name)
    out: dict[str, Any] = {}
    for i in inputs:
        ctx = decode_context(i, args.output_len)
        chains = {}
        for s in args.num_steps:
            spec = SpecConfig("EAGLE3", s, 1, s + 1)
            ratios = {
                c: steady_state_throughput(p, c, spec, args.mrr, context=ctx)
                / steady_state_throughput(p, c, None, args.mrr, context=ctx)
                for c in args.levels
            }
            chains[chain_name(s)] = {
                "pivot": pivot_concurrency(p, spec, args.mrr, MODEL_LIMIT, context=ctx),
                "ratios": ratios,
            }
        # the best chain per concurrency: first c where no chain beats the baseline
        best = None
        for c in range(1, MODEL_LIMIT + 1):
            base = steady_state_throughput(p, c, None, args.mrr, context=ctx)
            top = max(
                steady_state_throughput(p, c, SpecConfig("EAGLE3", s, 1, s + 1), args.mrr,
                                        context=ctx)
                for s in args.num_steps
            )  # fmt: skip
            if top <= base:
                best = c
                break
        out[shape_label(i, args.output_len)] = {
            "input_len": i,
            "context": ctx,
            "chains": chains,
            "best_chain_pivot": best,
        }
    return out


# ---- output -----------------------------------------------------------------------------


def fmt(x: float | None, spec: str = ".1f") -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x))):
        return "-"
    return format(x, spec)


def surface_lines(r: RunResult, chains: list[str]) -> list[str]:
    """Per shape: baseline throughput, each chain's ratio, the best variant and speedup."""
    out = []
    for shape, a in r.per_shape().items():
        tp = a.throughput
        best = a.best.set_index("concurrency")
        base = next((v for v in tp.columns if not str(v).startswith("eagle3")), None)
        names = {short(v): v for v in tp.columns if v != base}
        head = "| c | baseline tok/s | " + " | ".join(f"{c} / base" for c in chains)
        out += [f"{shape}:", "", head + " | best (choice) | speedup [95%] |"]
        out.append("|---|---|" + "---|" * len(chains) + "---|---|")
        for c in tp.index:
            b = tp.at[c, base] * r.scale if base in tp.columns else math.nan
            cells = []
            for ch in chains:
                v = names.get(ch)
                ok = v is not None and not pd.isna(tp.at[c, v]) and base in tp.columns
                cells.append(fmt(tp.at[c, v] / tp.at[c, base], ".3f") if ok else "-")
            row = best.loc[c] if c in best.index else None
            if row is None:
                bv = sp = "-"
            else:
                bv = short(row["best_variant"])
                if row.get("choice") and row["choice"] != row["best_variant"]:
                    bv += f" ({short(row['choice'])})"
                sp = f"{fmt(row['speedup'], '.3f')} [{fmt(row.get('speedup_lo'), '.3f')}-" + (
                    f"{fmt(row.get('speedup_hi'), '.3f')}]"
                )
            out.append(f"| {c} | {fmt(b, ',.0f')} | " + " | ".join(cells) + f" | {bv} | {sp} |")
        out.append("")
    return out


def report(
    res: dict[str, RunResult], model: dict[str, Any], args: argparse.Namespace
) -> tuple[list[str], dict[str, Any], bool]:
    lines: list[str] = []
    data: dict[str, Any] = {"model": model, "runs": {}, "checks": {}}
    chains = [chain_name(s) for s in args.num_steps]
    levels = args.levels
    full, one = res.get("all-shapes"), res.get("one-shape")
    for r in res.values():
        lines.append(
            f"{r.run}: run {r.run_id}, shapes {', '.join(r.shapes)}, time scale {r.scale}, "
            f"{r.wall_s:.0f} s wall" + (f"; FAILURE: {r.failure}" if r.failure else "")
            + (f"; {r.failed_cells} level rows not ok" if r.failed_cells else "")
        )  # fmt: skip

    # 1. pivots: measured, then the model's, apart
    measured: dict[str, dict[str, Pos]] = {}
    if full is not None and full.answer is not None:
        for shape, a in full.per_shape().items():
            row: dict[str, Pos] = {}
            for v, p in a.pivots.items():
                row[short(v)] = pivot_pos(p, levels)
            row["best chain"] = pivot_pos(best_chain_pivot(a), levels)
            measured[shape] = row
        lines += ["", "## 1. Pivot per shape", "", "Measured (all-shapes run; the answer's "
                  "per-shape pivots; 'best chain': the fastest chain at each level against "
                  "the baseline):", ""]  # fmt: skip
        cols = [*chains, "best chain"]
        lines.append("| shape | " + " | ".join(cols) + " |")
        lines.append("|---|" + "---|" * len(cols))
        for shape, row in measured.items():
            cells = [row.get(c, Pos("-", None, "-")).text for c in cols]
            lines.append(f"| {shape} | " + " | ".join(cells) + " |")
        if one is not None and one.answer is not None:
            for shape, a in one.per_shape().items():
                cells = [f"{short(v)} {pivot_pos(p, levels).text}" for v, p in a.pivots.items()]
                best = pivot_pos(best_chain_pivot(a), levels).text
                lines.append("")
                lines.append(
                    f"The one-shape run's {shape} (same cells on other launches, for the "
                    f"spread between runs): {'; '.join(cells)}; best chain {best}"
                )
        lines += ["", "Surface (all-shapes run, simulated tok/s; ratio = chain / baseline "
                  "throughput; best = the answer's best per level, choice where it names a "
                  "simpler near-tie):", ""]  # fmt: skip
        lines += surface_lines(full, chains)
    lines += [
        "MODEL'S PREDICTION, not measured: the simulator's perf_model.pivot_concurrency "
        f"(profile {args.profile}, max_running_requests {args.mrr}, steady-state decode at the "
        "mean context input + output/2; prefill left out; 'best chain': first c where no "
        "chain beats the baseline):",
        "",
    ]
    lines.append("| shape | context | " + " | ".join(chains) + " | best chain |")
    lines.append("|---|---|" + "---|" * len(chains) + "---|")
    for shape, m in model.items():
        cells = [model_pos(m["chains"][c]["pivot"], levels).text for c in chains]
        cells.append(model_pos(m["best_chain_pivot"], levels).text)
        lines.append(f"| {shape} | {m['context']:.0f} | " + " | ".join(cells) + " |")
    lines.append("")
    prof = get_profile(args.profile)
    pre = ", ".join(
        f"{shape} {prefill_step_ms(prof, m['input_len']):,.0f} ms"
        f" ({prefill_step_ms(prof, m['input_len'], SpecConfig('EAGLE3', 1, 1, 2)):,.0f} with a "
        "draft)"
        for shape, m in model.items()
    )
    lines.append(
        f"What pivot_concurrency leaves out and the measurement includes: a prefill step per "
        f"request, which stops every decode while it runs (model, time scale 1): {pre}."
    )
    lines.append("Model's ratio chain / baseline at the measured levels (prediction):")
    for shape, m in model.items():
        for c in chains:
            rr = " ".join(f"{m['chains'][c]['ratios'][x]:.3f}" for x in levels)
            lines.append(f"  {shape:16} {c:8} {rr}")
    data["measured_pivots"] = {
        s: {k: {"kind": p.kind, "position": p.value, "text": p.text} for k, p in row.items()}
        for s, row in measured.items()
    }

    # 2. cost of a shape
    lines += ["", "## 2. Extra measuring time of a shape", ""]
    lines.append(
        "| run | shapes | launches | server-held s | launch-to-ready s | benchmark s "
        "| measuring s per shape (wall; / scale = simulated) | wall s |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in res.values():
        per = "; ".join(f"{s} {v:.1f} ({v / r.scale:,.0f})" for s, v in r.measuring_s.items())
        lines.append(
            f"| {r.run} | {len(r.shapes)} | {r.launches} | {r.held_s:.1f} | {r.launch_s:.1f} | "
            f"{r.benchmark_s:.1f} | {per} | {r.wall_s:.0f} |"
        )
        data["runs"][r.run] = {
            "run_id": r.run_id, "scale": r.scale, "shapes": r.shapes, "launches": r.launches,
            "launched": r.launched, "held_s": r.held_s, "launch_to_ready_s": r.launch_s,
            "benchmark_s": r.benchmark_s, "measuring_s": r.measuring_s, "cells": r.cells,
            "wall_s": r.wall_s, "failure": r.failure, "code": r.code,
        }  # fmt: skip
    checks: dict[str, bool] = {}
    if full is not None and one is not None:
        first = full.shapes[0]
        extra = {s: v for s, v in full.measuring_s.items() if s != first}
        extra_s = sum(extra.values())
        launch_per = full.launch_s / full.launches if full.launches else math.nan
        lines.append("")
        lines.append(
            f"Added by the shapes beyond {first}: {extra_s:.1f} s of measuring (wall, level "
            f"rows) = {extra_s / full.scale:,.0f} s simulated; server-held "
            f"{full.held_s - one.held_s:+.1f} s and benchmark "
            f"{full.benchmark_s - one.benchmark_s:+.1f} s (warmups included) against the "
            "one-shape run; launch-to-ready "
            f"{full.launch_s:.1f} s vs {one.launch_s:.1f} s ({full.launches} vs {one.launches} "
            "launches: not repeated per shape)."
        )  # fmt: skip
        for s, v in extra.items():
            lines.append(
                f"  {s}: {v:.1f} s wall measuring = {v / full.scale:,.0f} s simulated = "
                f"{v / full.launch_s:.1f}x this run's launch-to-ready ({full.launch_s:.1f} s wall, "
                f"{launch_per:.2f} s per launch: the simulator's launch is not at scale); "
                f"{v / full.scale / (full.launches * SEEDS_LAUNCH_S):.2f}x the seeds' "
                f"{full.launches} launches x 8.5 min "
                f"({full.launches * SEEDS_LAUNCH_S / 60:.0f} min)"
            )  # fmt: skip
        sim_shape = {s: v / full.scale for s, v in full.measuring_s.items()}
        per_variant = {s: v / max(full.launches, 1) for s, v in sim_shape.items()}
        lines.append(
            "Per server (simulated measuring seconds of each shape / launches) against the "
            f"seeds' {SEEDS_LAUNCH_S / 60:g} min launch: "
            + ", ".join(
                f"{s} {v / 60:.1f} min ({v / SEEDS_LAUNCH_S:.2f}x a launch)"
                for s, v in per_variant.items()
            )
        )
        n_separate = len(full.shapes) * full.launches
        lines.append(
            f"Three single-shape sweeps would launch {n_separate} servers, the all-shapes sweep "
            f"{full.launches}: {n_separate - full.launches} launches saved = "
            f"{(n_separate - full.launches) * SEEDS_LAUNCH_S / 60:.0f} min at the seeds' 8.5 min, "
            f"against {extra_s / full.scale / 60:.0f} min of simulated measuring added by the "
            "extra shapes (what the seeds' box would spend measuring them, were it this "
            "profile)."
        )
        data["cost"] = {
            "extra_measuring_wall_s": extra_s,
            "extra_measuring_sim_s": extra_s / full.scale,
            "extra_per_shape_wall_s": extra,
            "launch_to_ready_s": {"one-shape": one.launch_s, "all-shapes": full.launch_s},
            "seeds_launch_s": SEEDS_LAUNCH_S,
            "sim_measuring_per_launch_s": per_variant,
        }
        checks["launches equal"] = one.launches == full.launches and one.launches > 0
        same = sorted(one.launched) == sorted(full.launched)
        lines.append(
            f"{'PASS' if checks['launches equal'] else 'FAIL'}: launches equal: one-shape "
            f"{one.launches}, all-shapes {full.launches} (one per variant: "
            f"{'same variants' if same else 'DIFFERENT variants'}: "
            f"{', '.join(short(v) for v in full.launched)})"
        )

    # 3. checks on the pivot
    if measured:
        shapes = list(measured)
        lo_s, hi_s = shapes[0], shapes[-1]
        a, b = measured[lo_s]["best chain"], measured[hi_s]["best chain"]
        up = separate(a, b)
        checks["pivot up with context"] = up
        lines += ["", "## 3. Checks", ""]
        lines.append(
            f"{'PASS' if up else 'FAIL'}: best chain's pivot higher at {hi_s} than at {lo_s} "
            f"(its whole range above): {b.text} vs {a.text}: {higher(a, b)}"
        )
        for c in chains:
            pa, pb = measured[lo_s].get(c), measured[hi_s].get(c)
            if pa is None or pb is None:
                continue
            lines.append(
                f"  (info) {c}: {pb.text} at {hi_s} vs {pa.text} at {lo_s}: {higher(pa, pb)}"
            )
        agree, notes = True, []
        for c in [*chains, "best chain"]:
            if c == "best chain":
                ma = model_pos(model[lo_s]["best_chain_pivot"], levels)
                mb = model_pos(model[hi_s]["best_chain_pivot"], levels)
            else:
                ma = model_pos(model[lo_s]["chains"][c]["pivot"], levels)
                mb = model_pos(model[hi_s]["chains"][c]["pivot"], levels)
            pa, pb = measured[lo_s].get(c), measured[hi_s].get(c)
            want = direction(ma.value, mb.value)
            got = direction(pa.value, pb.value) if pa and pb else "n/a"
            ok = want == got and want != "n/a"
            agree &= ok
            notes.append(
                f"  {c:10} model {ma.text} -> {mb.text} ({want}); measured "
                f"{pa.text if pa else '-'} -> {pb.text if pb else '-'} ({got}"
                + (f", {higher(pa, pb)}" if pa and pb and got == "up" else "")
                + f"): {'same' if ok else 'DIFFERENT'}"
            )
            steps = []
            for s0, s1 in itertools.pairwise(shapes):
                m0 = model_pos(model_pivot(model, s0, c), levels)
                m1 = model_pos(model_pivot(model, s1, c), levels)
                q0, q1 = measured[s0].get(c), measured[s1].get(c)
                steps.append(
                    f"{s0}->{s1} model {direction(m0.value, m1.value)}, measured "
                    f"{direction(q0.value, q1.value) if q0 and q1 else 'n/a'}"
                )
            if len(shapes) > 2:
                notes.append("      (info, consecutive shapes) " + "; ".join(steps))
        checks["direction as the model"] = agree
        lines.append(
            f"{'PASS' if agree else 'FAIL'}: pivots move from {lo_s} to {hi_s} in the "
            "direction the model predicts, every chain and the best chain:"
        )
        lines += notes
    data["checks"] = checks
    passed = bool(checks) and all(checks.values())
    return lines, data, passed


def higher(a: Pos, b: Pos) -> str:
    if separate(a, b):
        return "higher, ranges separate"
    if a.value is not None and b.value is not None and b.value > a.value:
        return "point estimate higher, ranges overlap"
    return "NOT higher"


def model_pivot(model: dict[str, Any], shape: str, chain: str) -> int | None:
    if chain == "best chain":
        return model[shape]["best_chain_pivot"]
    return model[shape]["chains"][chain]["pivot"]


def direction(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a"
    if a == b:  # inf == inf: never at both
        return "flat"
    return "up" if b > a else "down"


def run_sweep_reporting(config: Any) -> tuple[str | None, str | None]:
    try:
        return run_sweep(config)
    except Exception as exc:
        say(traceback.format_exc())
        return None, f"{type(exc).__name__}: {exc}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="default", help="bundled simulator profile")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--levels", type=int, nargs="+", help=f"concurrency (default {LEVELS})")
    parser.add_argument("--shapes", type=int, nargs="+", help=f"input lengths (default {SHAPES})")
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--num-steps", type=int, nargs="+", default=STEPS)
    parser.add_argument("--mrr", type=int, default=MRR, help="--max-running-requests, every server")
    parser.add_argument("--out", type=Path, help="results and report (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help=f"levels {QUICK_LEVELS}, output 64")
    parser.add_argument("--requests-per-stream", type=int, default=4, help="waves per pass")
    parser.add_argument("--min-requests", type=int, default=8, help="per pass")
    parser.add_argument("--stream-interval", type=int, default=8, help="sglang's, every server")
    parser.add_argument("--rate", type=float, default=5000.0, help="max chunks/s (baseline, top)")
    parser.add_argument("--min-step-ms", type=float, default=0.3, help="wall ms, baseline c=1")
    parser.add_argument("--time-scale", type=float, help="override the computed time scale")
    parser.add_argument("--analyse-only", action="store_true", help="re-print --out's runs")
    args = parser.parse_args()
    if args.quick:
        args.levels = args.levels or QUICK_LEVELS
        if args.output_len == 256:
            args.output_len = 64
    args.levels = sorted(set(args.levels or LEVELS))
    args.num_steps = sorted(set(args.num_steps))
    inputs = list(dict.fromkeys(args.shapes or SHAPES))
    if args.analyse_only and args.out is None:
        parser.error("--analyse-only needs --out")
    out = args.out or Path(tempfile.mkdtemp(prefix="specsweep-context-surface-"))
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault("PREFECT_HOME", str(out / "prefect"))
    started = time.monotonic()
    state = code_state(ROOT)
    scale = time_scale(args.profile, args.levels, args, args.mrr)
    res: dict[str, RunResult] = {}
    for run in RUNS:
        meta_file = out / run / "benchmark.json"
        if args.analyse_only or run not in args.runs:
            if not meta_file.exists():
                continue
            meta = json.loads(meta_file.read_text())
        else:
            shapes_in = inputs[:1] if run == "one-shape" else inputs
            config = parse_config(sweep_data(run, args, out, scale, shapes_in))
            labels = [shape_label(i, args.output_len) for i in shapes_in]
            say(f"[{time.monotonic() - started:4.0f}s] {run}: shapes {labels}, levels "
                f"{args.levels}, chains {args.num_steps}, time scale {scale}")  # fmt: skip
            t0 = time.monotonic()
            run_id, failure = run_sweep_reporting(config)
            meta = {"run": run, "run_id": run_id, "failure": failure, "scale": scale,
                    "shapes": labels, "levels": args.levels, "num_steps": args.num_steps,
                    "output_len": args.output_len, "inputs": shapes_in, "mrr": args.mrr,
                    "profile": args.profile, "code": state,
                    "wall_s": time.monotonic() - t0}  # fmt: skip
            meta_file.parent.mkdir(parents=True, exist_ok=True)
            meta_file.write_text(json.dumps(meta))
            say(f"[{time.monotonic() - started:4.0f}s] {run}: done in {meta['wall_s']:.0f} s"
                + (f" ({failure})" if failure else ""))  # fmt: skip
        if args.analyse_only:  # what was run, not the defaults
            args.levels, args.num_steps = meta["levels"], meta["num_steps"]
            args.output_len, args.mrr, args.profile = (
                meta["output_len"], meta["mrr"], meta["profile"],
            )  # fmt: skip
            if run == "all-shapes":
                inputs = meta["inputs"]
        res[run] = analyse(meta, out / run / "results")
    model = model_predictions(args.profile, inputs, args)
    lines, data, passed = report(res, model, args)
    total = sum(r.wall_s for r in res.values()) if args.analyse_only else time.monotonic() - started
    command = " ".join([".venv/bin/python", "benchmarks/context_surface.py", *sys.argv[1:]])
    verdict = "PASS" if passed else "FAIL"
    lines += [
        "",
        f"{verdict}. `{command}` in {total:.0f} s on {os.cpu_count()} CPUs; results in {out}",
        *sorted({f"Measured with {r.code or state}." for r in res.values()}),
    ]
    text = "\n".join(lines)
    print(text)
    (out / "report.md").write_text(text + "\n")
    data.update(command=command, total_s=total, verdict=verdict, levels=args.levels)
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
