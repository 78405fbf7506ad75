"""How much server time does `search: adaptive` save against the full grid, with the same answer?

Two gates share this script:

- **issue 30's (the default command)**: 20 random simulator profiles the search was never
  tuned on, the 15-variant grid, PASS on launches, decisions and regret: its docstring and
  code are in ``benchmarks/search_random.py``, which this script runs unless
  ``--profiles`` is given (``--out`` and ``--count`` pass through);
- **issue 17's (``--profiles default cheap-verify weak-drafter``)**, below.

For each of three simulator profiles the script runs the same config twice through the real
flow (``specsweep.flows.matrix_sweep.matrix_sweep`` in this process, on Prefect's ephemeral API, as
``specsweep run matrix-sweep`` does), once with ``search: grid`` and once with ``search:
adaptive``, each into its own results directory under --out. The config is a ``grid_sweep``
of EAGLE-3 num_steps 1-8 x topk {1, 2, 4} (the baseline plus 24 variants; a chain drafts
num_steps+1 tokens, a tree min(num_steps*topk+1, 16)) with ``--max-running-requests 64`` at
concurrency 1 2 4 8 16 32 64.

Per profile and mode it prints: launches (variants with a phase record), server-held
seconds (the sum over the phase records of held_until_unix - held_from_unix: launch to
teardown), that as a share of the grid's, the level cells measured and skipped (rows with
status "skipped" are levels the search chose not to measure; the rest of the grid's cells
belong to variants it never launched), and whether the answer agrees with the grid's
(``specsweep.analysis.answer.analyze_run``):

- best per level: the adaptive run's best variant is the grid's best ("same"), or one the
  grid could not separate from its best ("tie": in the grid's ``tied`` set, its near-tie
  rule), or one whose grid-measured throughput lies inside the grid best's 95% interval
  ("interval": >= ``best_lo``); anything else is a disagreement, listed;
- pivots: every pivot of the adaptive answer (one per launched speculative variant) has the
  kind of the grid's pivot of the same variant, and where both cross, their 95% ranges of
  the crossing overlap (the point estimate where a range is missing) ("same"); or one of
  the two is inconclusive and the other lies inside its bracket ("bracket": a crossing
  range overlapping it, `never` where it has no sure-below level, `always` where it has no
  sure-above level), counted as agreeing and listed; anything else is DIFFERENT.

The table also gives each run's wall time: the search's planning (model fits between
launches) is outside every server's hold.

For the adaptive run it also prints the search's stop reason (``runs.search_stop``), why
each variant was not launched (the ``final`` predictions) and the model's error on the
variants it launched: the ``before_launch`` prediction against the measured throughput,
median and max |error| and how often the measurement fell in [predicted_lo, predicted_hi].

Server time on the simulator is mostly benchmark time: a simulated server starts in ~0.6 s
where a real one takes minutes. A projection, labelled as one, prices each launch at the
seeds' 8.5 minutes per server launch on a real box plus the measured benchmark seconds
converted to simulated (real-box) seconds (benchmark_s / time scale).

PASS per profile: the adaptive run holds servers for <= 35% of the grid's server-held time
AND every level's best and every pivot agree. Exit 1 on a FAIL.

Profiles (checked with the simulator's own pure functions, ``specsweep.sim.perf_model.
steady_state_throughput``, before anything runs; the check is printed):

    default        bundled: speculation wins low (~1.5x at c=1) and loses high (~0.64x at 64)
    cheap-verify   written to --out: ``extends: default`` with the same baseline step but a
                   verify whose extra tokens cost less (target per_token_ms 0.3 instead of
                   0.694, per_seq_ms 0.857 instead of 0.463), a cheaper draft (per_token_ms
                   0.1) and leaner bookkeeping (speculation per_seq_ms 0.3): speculation
                   never loses (best 1.94x at c=1, 1.17x at c=64) although most variants do
                   at high concurrency
    weak-drafter   written to --out: ``extends: default`` with acceptance.p 0.30: no variant
                   beats the baseline at any level

Load: 128 prompt and 128 output tokens, one warmup request per stream, one pass per level
of max(8, 4 x c) requests (``load``'s own defaults: four waves, whose slices give the 95%
interval, docs/metrics.md; the first full run used adaptive_policy.py's 2 passes of
max(16, 1 x c) requests, whose single wave at c >= 16 left intervals of +-10-30% there:
near-ties everywhere on cheap-verify, no level the search could skip). Time as
benchmarks/adaptive_policy.py: ``--stream-interval 8`` on every server, and time compressed
(``SPECSWEEP_SIM_TIME_SCALE``) until a baseline decode step at c=1 lasts 0.5 ms of wall
time; throughputs are printed in simulated tok/s.

    P="--profiles default cheap-verify weak-drafter"
    .venv/bin/python benchmarks/search_savings.py $P                    # ~37 min, 2 CPUs
    .venv/bin/python benchmarks/search_savings.py $P --modes adaptive --out DIR  # ~4 min:
                                                  # the adaptive runs against DIR's grids
    .venv/bin/python benchmarks/search_savings.py $P --quick  # 1 4 16 64, steps 1 2 4 8
    .venv/bin/python benchmarks/search_savings.py --profiles default --modes grid \\
        --num-steps 1 2 3 --topk 1 2 --quick --out /tmp/ss                # a small grid
    .venv/bin/python benchmarks/search_savings.py --out /tmp/ss --analyse-only   # re-print

Measured on 2026-12-02, 2 CPUs. Grids: specsweep at d5cabfe (the default command, grids
564 + 355 + 1016 s wall). Adaptive: specsweep at 538e833, `--modes adaptive --out` the same
directory (230 s wall for the three), after the search's model got its per-level
throughput map and the stop rule its "clear lead" bar (6db2231):

    profile       mode      launches  server-held s  share  levels ok/skipped  best  pivots
    default       grid      25        511            100%   175/0              -     -
    default       adaptive  7         51             9.9%   34/15              7/7   6/6 (1 bracket)
    cheap-verify  grid      25        316            100%   175/0              -     -
    cheap-verify  adaptive  9         94             29.9%  58/5               7/7   8/8
    weak-drafter  grid      25        990            100%   175/0              -     -
    weak-drafter  adaptive  4         24             2.4%   13/15              7/7   3/3

    default PASS (9.9%), cheap-verify PASS (29.9%), weak-drafter PASS (2.4%). Projection at
    8.5 min per launch (not measured): 19.4%, 33.1%, 7.5%.

- Every level's best agrees: 20 of 21 the same variant, cheap-verify c=8 inside the grid's
  near-tie set (s3k1d4 against s2k1d3). The `choice` column (the simplest of a near-tie:
  what a policy runs) differs at 3 of 21 levels, each a level the grid itself calls a
  near-tie: default c=2 (s2k1d3 against the grid's s1k1d2) and c=4 (s2k1d3 against the
  baseline), cheap-verify c=1 (s2k1d3 against s2k2d5). Default's two: both runs measured
  both variants, so the runs' own noise decided which near-tie the simplest rule saw.
  cheap-verify c=1: the grid's choice s2k2d5 was not launched (it could at most tie), and
  the adaptive run found the simpler s2k1d3 inside its near-tie where the grid had not.
- The model's before-launch predictions: median |error| 1.4% (default), 1.7%
  (cheap-verify), 12.3% (weak-drafter, 4 points); every measurement inside [predicted_lo,
  predicted_hi] (70 of 70). The second chain seed (s8k1d9, predicted from the baseline and
  s1k1d2 alone) reads about -51% with a half-width over 3x its value: it launches anyway.
- Launched although neither the grid's best nor tied with it at any level: the seeds, and
  s6k4d16 (default) and s2k4d9 (weak-drafter), the first trees of their top-k, which no
  model can rule out before one tree of that width is measured.

Measured on 2026-12-07, 2 CPUs, the default command at f65db8e (2,666 s): default PASS
24.3% (9 launches), cheap-verify PASS 34.0% (8), weak-drafter PASS 6.8% (5); every level's
best and every pivot agree; before-launch predictions median |error| 2.1%, 2.0%, 2.5%, every
measurement inside its interval (29/29, 35/35, 6/6). Per launch the servers now hold about
twice what they did at 538e833 (16 against 7 s on default). Of default's 147.5 s held, the
phase records give 39.9 s to the drift calibration on the first server and 16.1 s to
measuring more where the decision needs it (load.decide_budget_s), both added since 538e833;
47.0 s to the benchmark (the 16.1 s included), 10.4 s to launch-to-ready, 1.1 s to teardowns.
Side by side on the
same stored grids (`--modes adaptive --out` a copy), specsweep at 7c4015e, before the model
read the server's `spec_correct_drafts_histogram` (with `--stream-interval 8` it had only
mean accept lengths): default PASS 22.6% (9 launches), cheap-verify FAIL 39.7% (9),
weak-drafter PASS 7.1% (6). One adaptive run per side: 22 launches against 24.

Earlier runs, the same command:
- at d5cabfe (the proportional rate-to-throughput rule, a bar at the best's upper end):
  default PASS 11.5% (9 launches), weak-drafter PASS 2.7% (5), cheap-verify FAIL 37.5% (12
  launches, answers agreeing). Its before-launch predictions read high where speculation
  wins (signed median +1.5%, 70-84% of errors positive): the fix was the per-level map.
- at a8c63ce with 2 passes of max(16, c) requests: default PASS 18.2%, weak-drafter PASS
  4.6%, cheap-verify FAIL 49.2%; its one-wave passes at c >= 16 gave +-10-30% intervals,
  so the grid called the baseline a near-tie of a 1.15x winner at c=16-64 and the search
  skipped no level on cheap-verify.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
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

from simbench import (  # noqa: E402
    WEAK_DRAFTER,
    code_state,
    free_port,
    profile_ref,
    run_sweep,
    say,
    time_scale,
)

from specsweep.config.file import parse_config  # noqa: E402
from specsweep.sim.perf_model import (  # noqa: E402
    SpecConfig,
    steady_state_throughput,
)
from specsweep.sim.profiles import get_profile  # noqa: E402

GOAL_SHARE = 0.35
DRAFT = "sim/eagle3-draft"
MRR = 64
LEVELS = [1, 2, 4, 8, 16, 32, 64]
QUICK_LEVELS = [1, 4, 16, 64]
STEPS = list(range(1, 9))
QUICK_STEPS = [1, 2, 4, 8]
MODES = ("grid", "adaptive")
SEEDS_LAUNCH_S = 8.5 * 60  # the seeds' minutes of launch per server on a real box
MAX_DRAFT_TOKENS = 16


@dataclass(frozen=True)
class Case:
    key: str
    shape: str  # "wins-low" | "never-loses" | "always-loses": what the check must show
    assumption: str  # one line, printed with the table
    profile: str | None = None  # a bundled profile name
    file: dict[str, Any] | None = None  # or a profile file written to --out


CASES = {
    c.key: c
    for c in (
        Case(
            "default",
            "wins-low",
            "bundled `default`: speculation wins low (chains of 2-3 steps ~1.5x at c=1) and "
            "loses high (~0.64x at c=64)",
            profile="default",
        ),
        Case(
            "cheap-verify",
            "never-loses",
            "`extends: default`, same baseline step (9.64 + 1.157 B ms) but verify tokens "
            "cost 0.3 ms (not 0.694; per-sequence 0.857), draft tokens 0.1 ms (not 0.25) and "
            "speculative bookkeeping 0.3 ms per request (not 1.0): a target whose verify "
            "stays memory-bound; the best variant never loses, most do at high c",
            file={
                "name": "cheap-verify",
                "extends": "default",
                "description": "default's baseline with a cheap verify: speculation never loses",
                "assumptions": "As default, except that a verify token costs 0.3 ms of the "
                "target's 1.157 ms per running request (per_seq 0.857 + per_token 0.3, so "
                "the baseline step is unchanged), a draft token 0.1 ms and the speculative "
                "bookkeeping 0.3 ms per request.",
                "target": {"per_seq_ms": 0.857, "per_token_ms": 0.3},
                "draft": {"per_token_ms": 0.1},
                "speculation": {"per_seq_ms": 0.3},
            },
        ),
        Case(
            "weak-drafter",
            "always-loses",
            "`extends: default` with acceptance.p 0.30 (default 0.85): a draft head trained "
            "on another distribution; no variant beats the baseline at any level",
            file=WEAK_DRAFTER,
        ),
    )
}


def grid_specs(args: argparse.Namespace) -> list[SpecConfig]:
    """The grid's speculative variants as the simulator resolves them (v1 worker)."""
    return [
        SpecConfig("EAGLE3", s, k, s + 1 if k == 1 else min(s * k + 1, MAX_DRAFT_TOKENS))
        for k in args.topk
        for s in args.num_steps
    ]


def spec_name(spec: SpecConfig) -> str:
    return f"s{spec.num_steps}k{spec.topk}d{spec.num_draft_tokens}"


def model_check(
    case: Case, ref: str, levels: list[int], args: argparse.Namespace
) -> tuple[bool, list[str]]:
    """The profile's shape by the simulator's steady-state model: (as intended, lines)."""
    profile = get_profile(ref)
    specs = grid_specs(args)
    lines, ratios = [], {}
    for c in levels:
        base = steady_state_throughput(profile, c, None, MRR)
        tps = {spec_name(s): steady_state_throughput(profile, c, s, MRR) for s in specs}
        best = max(tps, key=tps.__getitem__)
        ratios[c] = tps[best] / base
        wins = sum(t > base for t in tps.values())
        lines.append(
            f"  c={c:<3} baseline {base:7.1f} tok/s, best {best} {tps[best]:7.1f} "
            f"({ratios[c]:.3f}x), {wins}/{len(tps)} variants beat the baseline"
        )
    lo, hi = ratios[min(levels)], ratios[max(levels)]
    if case.shape == "wins-low":
        ok = lo > 1.0 and hi < 1.0
        want = "speculation wins at the lowest level and loses at the highest"
    elif case.shape == "never-loses":
        ok = all(r >= 1.0 for r in ratios.values())
        want = "the best variant at least matches the baseline at every level"
    else:
        ok = all(r < 1.0 for r in ratios.values())
        want = "no variant beats the baseline at any level"
    head = f"model check ({want}): {'yes' if ok else 'NO'}"
    return ok, [head, *lines]


def sweep_data(
    case: Case, mode: str, args: argparse.Namespace, out: Path, ref: str, scale: float,
    levels: list[int],
) -> dict[str, Any]:  # fmt: skip
    home = out / case.key / mode
    name = f"search-savings-{case.key}-{mode}"
    return {
        "name": name,
        "target": {"kind": "local", "name": name, "workdir": str(home)},
        "results_dir": str(home / "results"),
        "server": {
            "backend": "simulator",
            "model_path": f"sim/{case.key}",
            "port": free_port(),
            "max_running_requests": MRR,
            "extra_args": ["--stream-interval", str(args.stream_interval)],
            "startup_timeout_s": 60,
            "env": {
                "SPECSWEEP_SIM_PROFILE": ref,
                "SPECSWEEP_SIM_TIME_SCALE": str(scale),
                "SPECSWEEP_SIM_LOAD_SECONDS": "0.3",
                "SPECSWEEP_SIM_WARMUP_SECONDS": "0.3",
                "SPECSWEEP_SIM_SEED": "1",
            },
        },
        "grid_sweep": {
            "algorithm": "EAGLE3",
            "draft_model_path": DRAFT,
            "num_steps": args.num_steps,
            "topk": args.topk,
            "max_draft_tokens": MAX_DRAFT_TOKENS,
        },
        "search": mode,
        "load": {
            "concurrency": levels,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "requests_per_stream": args.requests_per_stream,
            "min_requests": args.min_requests,
            "warmup_requests": -1,
            "repeats": args.repeats,
            "seed": 0,
        },
    }


def run_sweep_reporting(config: Any) -> tuple[str | None, str | None]:
    """simbench.run_sweep, and the search under test raising: reported, the rest measured."""
    try:
        return run_sweep(config)
    except Exception as exc:
        say(traceback.format_exc())
        return None, f"{type(exc).__name__}: {exc}"


# ---- analysis ---------------------------------------------------------------------------


@dataclass
class ModeResult:
    key: str
    mode: str
    scale: float
    levels: list[int]
    wall_s: float
    run_id: str | None
    failure: str | None = None
    answer: Any = None
    launches: int = 0
    launched: list[str] = field(default_factory=list)
    held_s: float = 0.0
    benchmark_s: float = 0.0
    launch_s: float = 0.0
    measured: int = 0  # level rows with status ok
    skipped: int = 0  # level rows with status skipped
    failed: int = 0  # other statuses
    search_stop: str | None = None
    not_launched: list[tuple[str, str]] = field(default_factory=list)  # (variant, reason)
    pred_errors: list[float] = field(default_factory=list)  # predicted / measured - 1
    pred_inside: list[bool] = field(default_factory=list)
    pred_note: str = ""
    code: str = ""

    @property
    def projected_s(self) -> float:
        """Launches at the seeds' 8.5 min plus the benchmark in simulated seconds."""
        return self.launches * SEEDS_LAUNCH_S + self.benchmark_s / self.scale


def analyse(meta: dict[str, Any], results_dir: Path, key: str, mode: str) -> ModeResult:
    from specsweep.analysis.answer import analyze_run
    from specsweep.results.phases import held_seconds
    from specsweep.results.store import ResultsStore

    r = ModeResult(key, mode, meta["scale"], meta["levels"], meta["wall_s"], meta["run_id"])
    r.failure, r.code = meta.get("failure"), meta.get("code", "")
    if r.run_id is None:
        return r
    store = ResultsStore(results_dir)
    files = store.read_phase_files(r.run_id)
    r.launched = sorted({variant for variant, _, _ in files})
    r.launches = len(r.launched)
    for _, _, ph in files:
        r.held_s += held_seconds(ph)  # every hold of the variant, relaunches included
        r.benchmark_s += ph.get("benchmark_s", 0.0)
        r.launch_s += ph.get("launch_to_ready_s", 0.0)
    try:
        r.answer = analyze_run(store, r.run_id).first  # one GPU kind, one shape
    except LookupError as exc:
        r.failure = (r.failure + "; " if r.failure else "") + str(exc)
        return r
    status = r.answer.levels["status"]
    r.measured = int((status == "ok").sum())
    r.skipped = int((status == "skipped").sum())
    r.failed = int((~status.isin(["ok", "skipped"])).sum())
    run = r.answer.run or {}
    r.search_stop = run.get("search_stop")
    if mode == "adaptive":
        predictions(r, store)
    return r


def predictions(r: ModeResult, store: Any) -> None:
    """Not-launched reasons (final stage) and the before-launch predictions' error."""
    try:
        pred = store.read_predictions(r.run_id)
    except Exception as exc:  # a missing table reads as no predictions
        r.pred_note = f"no predictions read ({type(exc).__name__}: {exc})"
        return
    if pred is None or pred.empty:
        r.pred_note = "no predictions stored"
        return
    final = pred[pred["stage"] == "final"]
    if not final.empty:
        per_variant = final.drop_duplicates("variant")
        for row in per_variant.itertuples():
            if not bool(row.launched):
                r.not_launched.append((str(row.variant), str(row.reason)))
    before = pred[pred["stage"] == "before_launch"]
    ok = r.answer.levels[r.answer.levels["status"] == "ok"]
    measured = ok.set_index(["variant", "concurrency"])["output_throughput"]
    for row in before.itertuples():
        k = (row.variant, int(row.concurrency))
        if k not in measured.index or pd.isna(row.predicted_output_throughput):
            continue
        m = float(measured.loc[k])
        r.pred_errors.append(float(row.predicted_output_throughput) / m - 1.0)
        lo, hi = row.predicted_lo, row.predicted_hi
        if not (pd.isna(lo) or pd.isna(hi)):
            r.pred_inside.append(bool(lo <= m <= hi))
    if not r.pred_errors:
        r.pred_note = f"{len(before)} before-launch rows, none matched a measured level"


@dataclass
class Agreement:
    levels: list[tuple[int, str, str, str]] = field(default_factory=list)  # c, grid, adapt, how
    pivots: list[tuple[str, str, str, str]] = field(default_factory=list)  # v, grid, adapt, how

    @property
    def level_ok(self) -> int:
        return sum(how != "DISAGREE" for *_, how in self.levels)

    @property
    def pivot_ok(self) -> int:
        return sum(how != "DIFFERENT" for *_, how in self.pivots)

    @property
    def pivot_same(self) -> int:
        return sum(how == "same" for *_, how in self.pivots)

    @property
    def agrees(self) -> bool:
        return (
            bool(self.levels)
            and self.level_ok == len(self.levels)
            and self.pivot_ok == len(self.pivots)
        )


def compare(grid: ModeResult, adapt: ModeResult) -> Agreement:
    out = Agreement()
    if grid.answer is None or adapt.answer is None:
        return out
    gbest = grid.answer.best.set_index("concurrency")
    abest = adapt.answer.best.set_index("concurrency")
    gt = grid.answer.throughput
    for c in gbest.index:
        g = gbest.loc[c]
        gv = str(g["best_variant"])
        if c not in abest.index or pd.isna(abest.at[c, "best_variant"]):
            out.levels.append((int(c), gv, "-", "DISAGREE"))
            continue
        av = str(abest.at[c, "best_variant"])
        tied = {t.strip() for t in g["tied"].split(",")} if isinstance(g["tied"], str) else set()
        if av == gv:
            how = "same"
        elif av in tied:
            how = "tie"
        elif av in gt.columns and not pd.isna(g["best_lo"]) and gt.at[c, av] >= g["best_lo"]:
            how = "interval"
        else:
            how = "DISAGREE"
        out.levels.append((int(c), gv, av, how))
    for v, ap in adapt.answer.pivots.items():
        gp = grid.answer.pivots.get(v)
        if gp is None:
            out.pivots.append((v, "-", pivot_text(ap), "DIFFERENT"))
            continue
        out.pivots.append((v, pivot_text(gp), pivot_text(ap), pivot_agreement(gp, ap)))
    return out


def pivot_agreement(a: Any, b: Any) -> str:
    """same: one kind, and where both cross their 95% ranges overlap; bracket: one is
    inconclusive and the other lies inside its bracket (a crossing range overlapping it;
    never where the bracket has no sure-below level; always where it has no sure-above
    level); DIFFERENT otherwise."""
    if a.kind == b.kind:
        if a.kind != "crosses":
            return "same"
        (alo, ahi), (blo, bhi) = pivot_range(a), pivot_range(b)
        return "same" if alo <= bhi and blo <= ahi else "DIFFERENT"
    if b.kind == "inconclusive":
        a, b = b, a
    if a.kind != "inconclusive":
        return "DIFFERENT"
    low = a.low if a.low is not None else 0.0
    high = a.high if a.high is not None else math.inf
    if b.kind == "crosses":
        blo, bhi = pivot_range(b)
        return "bracket" if blo <= high and low <= bhi else "DIFFERENT"
    if b.kind == "never":
        return "bracket" if a.high is None else "DIFFERENT"
    if b.kind == "always":
        return "bracket" if a.low is None else "DIFFERENT"
    return "DIFFERENT"


def choices_agree(grid: ModeResult, adapt: ModeResult) -> int | None:
    """Levels where the two answers' `choice` (the simplest of the best and its near-ties:
    what a policy runs) is the same variant; informational, not a PASS criterion."""
    g = grid.answer.best.set_index("concurrency")["choice"]
    a = adapt.answer.best.set_index("concurrency")["choice"]
    return sum(bool(c in a.index and a[c] == v) for c, v in g.items()) if len(g) else None


def pivot_range(p: Any) -> tuple[float, float]:
    if p.low is not None and p.high is not None:
        return float(p.low), float(p.high)
    return float(p.concurrency), float(p.concurrency)


def pivot_text(p: Any) -> str:
    if p.kind == "crosses":
        lo, hi = pivot_range(p)
        return f"crosses c≈{p.concurrency:.3g} ({lo:.3g}-{hi:.3g})"
    if p.kind == "inconclusive":
        return f"inconclusive ({p.low}-{p.high})"
    return p.kind


# ---- output -----------------------------------------------------------------------------


def short(variant: str | None) -> str:
    if variant is None or variant == "-":
        return "-"
    parts = variant.split("-")  # eagle3-s2-k1-d3
    return "".join(parts[1:]) if len(parts) == 4 and parts[0] == "eagle3" else variant


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def level_table(grid: ModeResult, adapt: ModeResult, agree: Agreement) -> list[str]:
    gb = grid.answer.best.set_index("concurrency")
    ab = adapt.answer.best.set_index("concurrency")
    head = (
        "| c | grid best (tok/s) | grid tied | grid choice | adaptive best (tok/s) "
        "| adaptive choice | agrees |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for c, gv, av, how in agree.levels:
        g = gb.loc[c]
        a_t = ab.at[c, "best_throughput"] * adapt.scale if c in ab.index else math.nan
        a_ch = ab.at[c, "choice"] if c in ab.index else None
        tied = (
            " ".join(short(t.strip()) for t in g["tied"].split(","))
            if isinstance(g["tied"], str)
            else ""
        )
        lines.append(
            f"| {c} | {short(gv)} {g['best_throughput'] * grid.scale:,.0f} | {tied or '-'} | "
            f"{short(g['choice'])} | {short(av)} {fmt(a_t, ',.0f')} | {short(a_ch)} | {how} |"
        )
    return lines


def profile_report(
    case: Case, check: list[str], res: dict[str, ModeResult]
) -> tuple[str, bool | None]:
    out = [f"### {case.key}", "", f"Assumption: {case.assumption}", *check]
    for r in res.values():
        out.append(
            f"{r.mode}: run {r.run_id}, levels {r.levels}, time scale {r.scale}, "
            f"{r.wall_s:.0f} s wall" + (f"; FAILURE: {r.failure}" if r.failure else "")
        )
    grid, adapt = res.get("grid"), res.get("adaptive")
    agree = compare(grid, adapt) if grid and adapt else None
    out += [
        "",
        "| profile | mode | launches | server-held s | share of grid | levels measured/skipped "
        "| best per level agrees | pivots agree | wall s |",
    ]
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in res.values():
        share = r.held_s / grid.held_s if grid and grid.held_s else math.nan
        if r.mode == "grid" or agree is None:
            best_txt = piv_txt = "-"
        else:
            bad = [
                f"c={c}: {short(av)} vs {short(gv)}"
                for c, gv, av, how in agree.levels
                if how == "DISAGREE"
            ]
            best_txt = f"{agree.level_ok}/{len(agree.levels)}" + (
                f" ({'; '.join(bad)})" if bad else ""
            )
            pbad = [short(v) for v, _, _, how in agree.pivots if how == "DIFFERENT"]
            pbr = [short(v) for v, _, _, how in agree.pivots if how == "bracket"]
            piv_txt = f"{agree.pivot_ok}/{len(agree.pivots)}"
            notes = ([f"bracket: {', '.join(pbr)}"] if pbr else []) + (
                [f"not: {', '.join(pbad)}"] if pbad else []
            )
            piv_txt += f" ({'; '.join(notes)})" if notes else ""
        cells = len(r.levels) * (
            len(grid.answer.throughput.columns) if grid and grid.answer is not None else 0
        )
        out.append(
            f"| {case.key} | {r.mode} | {r.launches} | {r.held_s:.0f} | {fmt(share, '.1%')} | "
            f"{r.measured}/{r.skipped} (of {cells} cells) | {best_txt} | {piv_txt} | "
            f"{r.wall_s:.0f} |"
        )
    if grid and adapt:
        pshare = adapt.projected_s / grid.projected_s if grid.projected_s else math.nan
        out.append("")
        out.append(
            f"Projection (not measured): launches x {SEEDS_LAUNCH_S / 60:g} min (the seeds' "
            f"real-box launch) + benchmark seconds in simulated time: "
            f"grid {grid.projected_s / 3600:.2f} h "
            f"({grid.launches} launches, {grid.benchmark_s / grid.scale / 60:.0f} min benchmark), "
            f"adaptive {adapt.projected_s / 3600:.2f} h ({adapt.launches} launches, "
            f"{adapt.benchmark_s / adapt.scale / 60:.0f} min benchmark): share {pshare:.1%}"
        )
    passed = None
    if agree is not None and grid.answer is not None and adapt.answer is not None:
        out += [
            "",
            "Best per level, simulated tok/s ('tie': in the grid's near-tie set; 'interval': the "
            "adaptive best's grid throughput >= the grid best's 95% lower bound):",
        ]
        out += level_table(grid, adapt, agree)
        out.append("")
        out.append(
            "Pivots (grid | adaptive), per launched speculative variant ('bracket': one is "
            "inconclusive and the other lies inside its bracket):"
        )
        for v, gp, ap, how in agree.pivots:
            out.append(f"  {short(v):10} {gp:32} | {ap:32} {how}")
        share = adapt.held_s / grid.held_s if grid.held_s else math.inf
        passed = share <= GOAL_SHARE and agree.agrees
        why = [f"server-held share {share:.1%} (goal <= {GOAL_SHARE:.0%})"]
        why.append(f"best per level {agree.level_ok}/{len(agree.levels)}")
        same_choice = choices_agree(grid, adapt)
        if same_choice is not None:
            why[-1] += f" (choice column: {same_choice}/{len(agree.levels)} the same)"
        why.append(
            f"pivots {agree.pivot_ok}/{len(agree.pivots)} "
            f"({agree.pivot_same} same kind and range, {agree.pivot_ok - agree.pivot_same} "
            f"inside an inconclusive bracket)"
        )
        out.insert(1, f"{'PASS' if passed else 'FAIL'}: " + ", ".join(why))
    elif grid and adapt:
        passed = False
        out.insert(1, "FAIL: a run has no answer (see the failures above)")
    if adapt is not None:
        out.append("")
        out.append(f"Adaptive search stop: {adapt.search_stop or '(none recorded)'}")
        if grid is not None and grid.answer is not None and adapt.launched:
            g = grid.answer.best
            mattered = set(g["best_variant"].dropna()) | {
                t.strip() for x in g["tied"].dropna() for t in str(x).split(",")
            }
            idle = [short(v) for v in adapt.launched if v not in mattered and v != "baseline"]
            out.append(
                f"Launched but neither the grid's best nor tied with it at any level "
                f"({len(idle)} of {adapt.launches}): {', '.join(idle) or 'none'}"
            )
        if adapt.not_launched:
            out.append(f"Not launched ({len(adapt.not_launched)}):")
            for v, reason in adapt.not_launched:
                out.append(f"  {short(v):10} {reason}")
        if adapt.pred_errors:
            errs = [abs(e) for e in adapt.pred_errors]
            worst = max(adapt.pred_errors, key=abs)
            cover = (
                f"{sum(adapt.pred_inside)}/{len(adapt.pred_inside)} "
                f"({sum(adapt.pred_inside) / len(adapt.pred_inside):.0%})"
                if adapt.pred_inside else "no intervals"
            )  # fmt: skip
            out.append(
                f"Model error before launch ({len(errs)} variant-levels): median |error| "
                f"{statistics.median(errs):.1%}, max {worst:+.1%}; measured inside "
                f"[predicted_lo, predicted_hi]: {cover}"
            )
        if adapt.pred_note:
            out.append(f"Predictions: {adapt.pred_note}")
    return "\n".join(out), passed


def main() -> int:
    if "--profiles" not in sys.argv[1:] and "--analyse-only" not in sys.argv[1:]:
        import search_random  # issue 30's gate (beside this file)

        return search_random.main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--levels", type=int, nargs="+", help=f"concurrency (default {LEVELS})")
    parser.add_argument("--out", type=Path, help="results, logs, profiles (default: a temp dir)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"levels {QUICK_LEVELS}, num_steps {QUICK_STEPS} (12 variants)",
    )
    parser.add_argument(
        "--num-steps",
        type=int,
        nargs="+",
        help="grid_sweep num_steps (default 1-8; --quick 1 2 4 8)",
    )
    parser.add_argument("--topk", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument(
        "--requests-per-stream", type=int, default=4, help="waves per pass (load's default)"
    )
    parser.add_argument("--min-requests", type=int, default=8, help="per pass (load's default)")
    parser.add_argument("--repeats", type=int, default=1, help="passes per level")
    parser.add_argument("--stream-interval", type=int, default=8, help="sglang's, every server")
    parser.add_argument("--rate", type=float, default=5000.0, help="max chunks/s (baseline, top)")
    parser.add_argument("--min-step-ms", type=float, default=0.5, help="wall ms, baseline c=1")
    parser.add_argument("--time-scale", type=float, help="override the per-profile time scale")
    parser.add_argument(
        "--analyse-only",
        action="store_true",
        help="print the tables of the runs already in --out (launches nothing)",
    )
    args = parser.parse_args()
    if args.quick:
        args.levels = args.levels or QUICK_LEVELS
        args.num_steps = args.num_steps or QUICK_STEPS
    args.num_steps = sorted(set(args.num_steps or STEPS))
    args.topk = sorted(set(args.topk))
    levels = sorted(set(args.levels or LEVELS))
    if args.analyse_only and args.out is None:
        parser.error("--analyse-only needs --out")
    out = args.out or Path(tempfile.mkdtemp(prefix="specsweep-search-savings-"))
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault("PREFECT_HOME", str(out / "prefect"))  # its own ephemeral DB
    started = time.monotonic()
    state = code_state(ROOT)
    texts, verdicts, walls, codes = [], {}, 0.0, set()
    for key in args.profiles:
        case = CASES[key]
        if args.analyse_only:  # the check and the tables use what was run
            stored = [out / key / m / "benchmark.json" for m in MODES]
            stored = [json.loads(f.read_text()) for f in stored if f.exists()]
            if not stored:
                continue
            levels = stored[0]["levels"]
            args.num_steps = stored[0].get("grid", {}).get("num_steps", args.num_steps)
            args.topk = stored[0].get("grid", {}).get("topk", args.topk)
        ref = profile_ref(case, out)
        shape_ok, check = model_check(case, ref, levels, args)
        say(f"{key}: " + "\n".join(check))
        res: dict[str, ModeResult] = {}
        for mode in MODES:
            meta_file = out / key / mode / "benchmark.json"
            if args.analyse_only or mode not in args.modes:
                if not meta_file.exists():
                    continue
                meta = json.loads(meta_file.read_text())
            else:
                scale = time_scale(ref, levels, args, MRR)
                config = parse_config(sweep_data(case, mode, args, out, ref, scale, levels))
                say(f"[{time.monotonic() - started:4.0f}s] {key} {mode}: levels {levels}, "
                    f"time scale {scale}")  # fmt: skip
                t0 = time.monotonic()
                run_id, failure = run_sweep_reporting(config)
                meta = {"run_id": run_id, "failure": failure, "scale": scale, "levels": levels}
                meta["code"], meta["wall_s"] = state, time.monotonic() - t0
                meta["grid"] = {"num_steps": args.num_steps, "topk": args.topk}
                meta_file.parent.mkdir(parents=True, exist_ok=True)
                meta_file.write_text(json.dumps(meta))
                say(f"[{time.monotonic() - started:4.0f}s] {key} {mode}: done in "
                    f"{meta['wall_s']:.0f} s" + (f" ({failure})" if failure else ""))  # fmt: skip
            res[mode] = analyse(meta, out / key / mode / "results", key, mode)
            walls += res[mode].wall_s
            codes.add(res[mode].code or state)
        text, passed = profile_report(case, check, res)
        if not shape_ok:
            text += "\nThe profile does not have the intended shape by the model (check above)."
            passed = False if passed is not None else None
        texts.append(text)
        verdicts[key] = passed
    total = walls if args.analyse_only else time.monotonic() - started
    text = "\n\n".join(texts)
    summary = ", ".join(
        f"{k} {'PASS' if v else 'FAIL' if v is not None else 'n/a (one mode only)'}"
        for k, v in verdicts.items()
    )
    command = " ".join(["`.venv/bin/python", "benchmarks/search_savings.py", *sys.argv[1:]])
    text += f"\n\n{summary}. {command}` in {total:.0f} s on {os.cpu_count()} CPUs; results in {out}"
    text += "".join(f"\nMeasured with {code}." for code in sorted(codes))
    print(text)
    (out / "report.md").write_text(text + "\n")
    return 1 if any(v is False for v in verdicts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
