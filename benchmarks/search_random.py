"""Issue 30's gate: does the adaptive search save launches on servers it was never tuned on?

``benchmarks/search_savings.py`` runs this by default (``--profiles`` runs issue 17's three
named profiles instead). It draws ``--count`` (20) random simulator profiles from the
ranges in ``RANGES`` with the seed ``SEED``, both fixed here before any result was seen,
and for each runs the same sweep twice through the real flow (``specsweep.flows.
matrix_sweep`` in this process, on Prefect's ephemeral API, as ``specsweep run`` does):
``search: grid`` and ``search: adaptive``. The sweep is the issue's realistic grid: the
baseline plus EAGLE-3 num_steps 1-7 x topk {1, 4} (15 variants; a chain drafts steps + 1
tokens, a tree min(4 steps + 1, 16)), concurrency 1 2 4 8 16 32, ``--max-running-requests
64``, every load setting at its default (drift calibration and measuring more included).

Each profile ``extends: default`` and draws, independently, log-uniform where a constant
scales (costs) and uniform where it is a probability:

- the target's step: fixed ms, ms per running sequence and per token (the verify's cost
  of k+1 tokens, the baseline's batch scaling);
- the draft's fixed and per-token ms; the speculative bookkeeping (fixed, per sequence);
- acceptance: first-position probability, decay per position, what topk adds.

Noise is the simulator's own (acceptance sampled per draft token, per request), not drawn:
it has no noise constant. Before anything runs, the script prints each profile's truth
(``perf_model.steady_state_throughput`` at the run's mean decode context) and checks that
the draws include a profile where speculation never pays and one where it still wins at
c=64 (the issue's "wide enough"); a draw without both is a FAIL of the ranges.

Per profile it prints launches and server time (held, every hold of every variant: the
phase records) as shares of the grid's, and, for the search:

- **same decision**: the decision (``analysis.decision``) names the same config at every
  level and the exported SGLang tiers are the same (both refused counts as the same);
- **regret**: at each level, how much less the search's choice yields than the grid's
  choice there, by the truth's own numbers (what searching instead of running the grid
  cost: 0 where they agree); the worst level is printed. Beside it, for both runs, the
  worst shortfall of the choice against the truth's best (``vs best``): what the decision
  itself leaves, by its tie rule (the simplest of a near-tie) and the measurement's noise;
- winners outside a truth near-tie (configs within 2% of the truth's best are all right)
  and pivots within 15% of the truth's crossing (as ``decision_accuracy.py``);
- the coverage of the search's before-launch prediction intervals (levels measured after
  a prediction that fell inside its 95% interval).

PASS when, over the profiles, the search's median launch share is at most 35% of the
grid's (15 launches), its decision is the grid's on at least 90% of the profiles, and its
regret is at most 3% at every level of every profile (the issue's "never a decision
worse than 3% at any level": worse than the grid's, which the search replaces). Exit 1 on FAIL.

One profile takes about 6-10 minutes on 2 CPUs (grid and search), so the whole run takes
2-3 hours. Results go under --out, one folder per profile; a rerun with the same --out
skips the profiles measured by the same commit (and refuses to mix two commits' runs).

    .venv/bin/python benchmarks/search_savings.py --out /tmp/sr            # 20 profiles
    .venv/bin/python benchmarks/search_savings.py --out /tmp/sr --count 2  # the first two
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from simbench import code_state, free_port, prefect_here, run_sweep, say  # noqa: E402

SEED = 30
COUNT = 20
LEVELS = [1, 2, 4, 8, 16, 32]
STEPS = list(range(1, 8))
TOPK = [1, 4]
MRR = 64
INPUT, OUTPUT = 128, 128
MAX_DRAFT_TOKENS = 16
STREAM_INTERVAL = 8
NEAR = 0.02  # truth configs within 2% of the truth's best are all right answers
PIVOT_TOLERANCE = 0.15
GOAL_LAUNCH_SHARE = 0.35
GOAL_SAME = 0.90
GOAL_REGRET = 0.03
# (section, key): (low, high, log-uniform?) -- fixed before any result was seen
RANGES: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("target", "t0_ms"): (4.0, 20.0, True),
    ("target", "per_seq_ms"): (0.15, 1.2, True),
    ("target", "per_token_ms"): (0.15, 1.5, True),
    ("draft", "t0_ms"): (0.2, 2.5, True),
    ("draft", "per_token_ms"): (0.03, 0.8, True),
    ("speculation", "overhead_ms"): (0.05, 1.0, True),
    ("speculation", "per_seq_ms"): (0.1, 2.0, True),
    ("acceptance", "p"): (0.3, 0.95, False),
    ("acceptance", "decay"): (0.6, 0.97, False),
    ("acceptance", "topk_gain"): (0.05, 1.0, False),
}


def draw_profiles(count: int, seed: int = SEED) -> list[dict[str, Any]]:
    """The profiles, as profile files (`extends: default`), in draw order."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        sections: dict[str, dict[str, float]] = {}
        for (section, key), (lo, hi, log) in RANGES.items():
            u = rng.random()
            value = (
                math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
                if log
                else (lo + u * (hi - lo))
            )
            sections.setdefault(section, {})[key] = round(value, 4)
        out.append(
            {
                "name": f"random-{i:02d}",
                "extends": "default",
                "description": f"issue 30's random profile {i} (seed {seed})",
                "assumptions": "Drawn by benchmarks/search_random.py from its RANGES.",
                **sections,
            }
        )
    return out


# ---- the truth ----------------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    table: dict[int, dict[str, float]]  # level -> variant label -> true output tok/s
    pivots: dict[str, float]  # variant label -> its true crossing (absent: none in 1..32)
    best_at_64: float  # the best speculative variant over the baseline at c=64

    def shape(self) -> str:
        ratios = [max(row.values()) / row["baseline"] for row in self.table.values()]
        if all(r <= 1.0 for r in ratios):
            return "never pays"
        if self.best_at_64 > 1.0:
            return "wins to c=64"
        return "wins low"


def truth(ref: str, variants: list[Any]) -> Truth:
    from specsweep.sim.perf_model import (
        SpecConfig,
        decode_context,
        pivot_concurrency,
        steady_state_throughput,
    )
    from specsweep.sim.profiles import get_profile

    p = get_profile(ref)
    ctx = decode_context(INPUT, OUTPUT)
    specs = {
        v.label: None
        if v.is_baseline
        else SpecConfig(
            "EAGLE3", v.resolved_num_steps, v.resolved_topk, v.resolved_num_draft_tokens
        )
        for v in variants
    }

    def tput(spec: Any, c: int) -> float:
        return steady_state_throughput(p, c, spec, MRR, context=ctx)

    table = {c: {n: tput(s, c) for n, s in specs.items()} for c in LEVELS}
    pivots = {}
    for name, spec in specs.items():
        if spec is None:
            continue
        c = pivot_concurrency(p, spec, MRR, limit=max(LEVELS), context=ctx)
        if c is None or c == 1:
            continue
        r0 = tput(spec, c - 1) / tput(None, c - 1)
        r1 = tput(spec, c) / tput(None, c)
        x0, x1 = math.log2(c - 1), math.log2(c)
        pivots[name] = 2 ** (x0 + (1 - r0) * (x1 - x0) / (r1 - r0)) if r1 != r0 else float(c)
    base64 = tput(None, 64)
    best64 = max(tput(s, 64) for s in specs.values() if s is not None) / base64
    return Truth(table, pivots, best64)


# ---- one profile's runs -------------------------------------------------------------


def sweep_data(key: str, mode: str, ref: str, scale: float, out: Path) -> dict[str, Any]:
    home = out / key / mode
    name = f"search-random-{key}-{mode}"
    return {
        "name": name,
        "target": {"kind": "local", "name": name, "workdir": str(home)},
        "results_dir": str(home / "results"),
        "server": {
            "backend": "simulator",
            "model_path": f"sim/{key}",
            "port": free_port(),
            "max_running_requests": MRR,
            "extra_args": ["--stream-interval", str(STREAM_INTERVAL)],
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
            "draft_model_path": "sim/eagle3-draft",
            "num_steps": STEPS,
            "topk": TOPK,
            "max_draft_tokens": MAX_DRAFT_TOKENS,
        },
        "search": mode,
        "load": {
            "concurrency": LEVELS,
            "input_len": INPUT,
            "output_len": OUTPUT,
            "warmup_requests": -1,
            "seed": 0,
        },
    }


@dataclass
class ModeRun:
    run_id: str | None
    failure: str | None
    wall_s: float
    code: str
    launches: int = 0
    held_s: float = 0.0
    choice: dict[int, str] = field(default_factory=dict)
    tiers: dict[int, int] | None = None
    pivots: dict[str, Any] = field(default_factory=dict)
    checked: int = 0  # levels measured after a before-launch prediction
    inside: int = 0  # of them inside its 95% interval
    stop: str | None = None


def run_mode(key: str, mode: str, ref: str, scale: float, out: Path, state: str) -> dict:
    """Run (or reuse, when the same commit ran it) one mode; its stored meta."""
    from specsweep.config.file import parse_config

    meta_file = out / key / mode / "benchmark.json"
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
        if meta.get("code") == state and meta.get("run_id"):
            return meta
        raise SystemExit(
            f"{meta_file} was measured by {meta.get('code')}, not {state}: use another --out"
        )
    config = parse_config(sweep_data(key, mode, ref, scale, out))
    t0 = time.monotonic()
    try:
        run_id, failure = run_sweep(config)
    except Exception as exc:  # the search under test raising: reported
        say(traceback.format_exc())
        run_id, failure = None, f"{type(exc).__name__}: {exc}"
    meta = {"run_id": run_id, "failure": failure, "wall_s": time.monotonic() - t0,
            "code": state, "scale": scale}  # fmt: skip
    meta_file.parent.mkdir(parents=True, exist_ok=True)
    meta_file.write_text(json.dumps(meta))
    return meta


def analyse(meta: dict, results: Path) -> ModeRun:
    from specsweep.analysis.answer import analyze_run
    from specsweep.results.phases import held_seconds
    from specsweep.results.store import ResultsStore

    r = ModeRun(meta["run_id"], meta["failure"], meta["wall_s"], meta["code"])
    if r.run_id is None:
        return r
    store = ResultsStore(results)
    files = store.read_phase_files(r.run_id)
    r.launches = int(sum(p.get("holds", 1.0) for _, _, p in files))
    r.held_s = sum(held_seconds(p) for _, _, p in files)
    cell = analyze_run(store, r.run_id).first
    r.choice = cell.decision.choice_at()
    r.tiers = dict(cell.export.tiers) if cell.export is not None else None
    r.pivots = dict(cell.pivots)
    r.checked, r.inside, _ = cell.search.check_summary()
    r.stop = (cell.run or {}).get("search_stop")
    return r


@dataclass
class Judged:
    key: str
    shape: str
    launch_share: float
    time_share: float
    same: bool
    differs: list[str]
    regret: float  # worst level's 1 - truth(choice) / truth(best)
    regret_at: int | None
    wrong: list[str]  # winners outside a truth near-tie
    winners: int
    pivots_ok: int
    pivots: int
    checked: int
    inside: int
    search: ModeRun
    grid: ModeRun
    search_vs_best: float  # the search's worst level against the truth's best
    grid_vs_best: float  # the grid's


def judge(key: str, t: Truth, grid: ModeRun, search: ModeRun, variants: int) -> Judged:
    differs = [
        f"c={c}: {search.choice.get(c)} (grid {grid.choice.get(c)})"
        for c in LEVELS
        if search.choice.get(c) != grid.choice.get(c)
    ]
    if search.tiers != grid.tiers:
        differs.append(f"tiers {search.tiers} (grid {grid.tiers})")
    regret, at, wrong, winners = 0.0, None, [], 0
    for c, choice in search.choice.items():
        row = t.table[c]
        top = max(row.values())
        theirs = grid.choice.get(c)
        loss = 1.0 - row.get(choice, 0.0) / row[theirs] if theirs in row else 0.0
        if loss > regret:
            regret, at = loss, c
        right = {n for n, v in row.items() if v >= top * (1 - NEAR)}
        winners += choice in right
        if choice not in right:
            best = max(row, key=row.__getitem__)
            wrong.append(f"c={c}: chose {choice}, truth {best} (+{top / row[choice] - 1:.1%})")
    ok = compared = 0
    for name, pivot in search.pivots.items():
        true_c = t.pivots.get(name)
        if true_c is None or pivot.kind != "crosses" or pivot.concurrency is None:
            continue
        compared += 1
        ok += abs(pivot.concurrency / true_c - 1) <= PIVOT_TOLERANCE
    return Judged(
        key, t.shape(), search.launches / variants,
        search.held_s / grid.held_s if grid.held_s else math.nan,
        not differs and search.run_id is not None, differs, regret, at, wrong,
        winners, ok, compared, search.checked, search.inside, search, grid,
        _short_of_best(t, search.choice), _short_of_best(t, grid.choice),
    )  # fmt: skip


def _short_of_best(t: Truth, choice: dict[int, str]) -> float:
    """The worst level's 1 - truth(choice) / truth's best."""
    return max(
        (1.0 - t.table[c].get(v, 0.0) / max(t.table[c].values()) for c, v in choice.items()),
        default=math.nan,
    )


def _scale(ref: str) -> float:
    """simbench.time_scale with search_savings.py's pacing (0.5 ms per baseline step at
    c=1, at most 5,000 chunks per second at the top level)."""
    from types import SimpleNamespace

    from simbench import time_scale

    args = SimpleNamespace(
        time_scale=None, stream_interval=STREAM_INTERVAL, rate=5000.0, min_step_ms=0.5
    )
    return time_scale(ref, LEVELS, args, MRR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results (default: a temp dir)")
    parser.add_argument("--count", type=int, default=COUNT, help="profiles to run, in order")
    parser.add_argument("--draws-only", action="store_true", help="print the draws and stop")
    args = parser.parse_args(argv)
    out = (args.out or Path(tempfile.mkdtemp(prefix="specsweep-search-random-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    from specsweep.config.file import parse_config
    from specsweep.config.plan import sweep_variants

    drawn = draw_profiles(COUNT)
    refs, truths = [], []
    (out / "profiles").mkdir(exist_ok=True)
    import yaml

    for prof in drawn:
        path = out / "profiles" / f"{prof['name']}.yaml"
        path.write_text(yaml.safe_dump(prof, sort_keys=False))
        refs.append(str(path))
    variants = sweep_variants(parse_config(sweep_data("x", "grid", refs[0], 0.1, out)))
    specs = len(variants)
    shapes: dict[str, int] = {}
    for prof, ref in zip(drawn, refs, strict=True):
        t = truth(ref, variants)
        truths.append(t)
        shapes[t.shape()] = shapes.get(t.shape(), 0) + 1
        best = {c: max(row, key=row.__getitem__) for c, row in t.table.items()}
        ratio = {c: t.table[c][best[c]] / t.table[c]["baseline"] for c in (1, 8, 32)}
        say(
            f"{prof['name']}: {t.shape()}; truth's best "
            + ", ".join(f"c={c} {best[c]} {r:.2f}x" for c, r in ratio.items())
            + f"; best at c=64 {t.best_at_64:.2f}x"
        )
    wide = shapes.get("never pays", 0) > 0 and shapes.get("wins to c=64", 0) > 0
    say(f"draws ({COUNT}, seed {SEED}): {shapes}; wide enough: {'yes' if wide else 'NO'}")
    if args.draws_only:
        return 0 if wide else 1
    prefect_here(out)
    state = code_state(ROOT)
    started = time.monotonic()
    judged: list[Judged] = []
    for prof, ref, t in list(zip(drawn, refs, truths, strict=True))[: args.count]:
        key = prof["name"]
        scale = _scale(ref)
        runs = {}
        for mode in ("grid", "adaptive"):
            say(f"[{time.monotonic() - started:5.0f}s] {key} {mode} (time scale {scale})")
            meta = run_mode(key, mode, ref, scale, out, state)
            runs[mode] = analyse(meta, out / key / mode / "results")
            if runs[mode].failure:
                say(f"  {key} {mode}: {runs[mode].failure}")
        judged.append(judge(key, t, runs["grid"], runs["adaptive"], specs))
    print(report(judged, specs, wide, state, time.monotonic() - started, out))
    return 0 if verdict(judged, wide, args.count)[0] else 1


def verdict(judged: list[Judged], wide: bool, count: int) -> tuple[bool, str]:
    if not judged:
        return False, "FAIL: nothing ran"
    share = statistics.median(j.launch_share for j in judged)
    same = sum(j.same for j in judged) / len(judged)
    worst = max(j.regret for j in judged)
    ok = (
        wide
        and len(judged) >= COUNT
        and count >= COUNT
        and share <= GOAL_LAUNCH_SHARE
        and same >= GOAL_SAME
        and worst <= GOAL_REGRET
    )
    text = (
        f"{'PASS' if ok else 'FAIL'}: over {len(judged)} profiles (of {COUNT} needed), the "
        f"search's median launch share {share:.0%} (goal <= {GOAL_LAUNCH_SHARE:.0%}), the "
        f"grid's decision on {same:.0%} (goal >= {GOAL_SAME:.0%}), its worst level {worst:.1%} "
        f"below the grid's choice by the truth (goal <= {GOAL_REGRET:.0%}); ranges wide "
        f"enough: {'yes' if wide else 'no'}"
    )
    return ok, text


def report(judged: list[Judged], specs: int, wide: bool, state: str, wall: float, out: Path) -> str:
    lines = [
        f"grid: baseline + EAGLE-3 steps 1-7 x topk {{1, 4}} ({specs} variants), c={LEVELS}",
        "",
        "profile    shape         launches  time   same  regret      vs best (grid)  "
        "winners  pivots  pred. inside",
    ]
    for j in judged:
        at = f"(c={j.regret_at})" if j.regret_at else ""
        lines.append(
            f"{j.key:<10} {j.shape:<13} {j.search.launches:>2}/{specs:<2} {j.launch_share:>4.0%} "
            f"{j.time_share:>5.0%}  {'yes' if j.same else 'no':<4}  {j.regret:>5.1%} {at:<7} "
            f"{j.search_vs_best:>5.1%} ({j.grid_vs_best:.1%})   "
            f"{j.winners}/{len(j.search.choice):<6} {j.pivots_ok}/{j.pivots:<5}  "
            f"{j.inside}/{j.checked}"
        )
        for text in [*j.differs, *j.wrong]:
            lines.append(f"    {text}")
        if j.search.stop:
            lines.append(f"    stop: {j.search.stop}")
    launched = sum(j.search.launches for j in judged)
    checked = sum(j.checked for j in judged)
    inside = sum(j.inside for j in judged)
    times = [j.time_share for j in judged if not math.isnan(j.time_share)]
    lines += [
        "",
        f"total: launches {launched} of {specs * len(judged)} "
        f"({launched / (specs * len(judged)):.0%}), "
        f"median {statistics.median(j.launch_share for j in judged):.0%}; server time "
        f"{sum(j.search.held_s for j in judged):.0f} of {sum(j.grid.held_s for j in judged):.0f} s "
        f"(median {statistics.median(times) if times else math.nan:.0%}); same decision "
        f"{sum(j.same for j in judged)}/{len(judged)}; prediction intervals {inside}/{checked} "
        f"inside ({inside / checked if checked else math.nan:.0%} of nominal 95%)",
        verdict(judged, wide, len(judged))[1],
        f"Measured with {state} in {wall:.0f} s on {os.cpu_count()} CPUs; results in {out}",
    ]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
