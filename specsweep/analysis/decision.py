"""The decision: one typed answer per cell (GPU kind, load shape), built once.

A run answers one question per cell: *what do I deploy, what does it buy me at each
level, and is that settled?* `decide` builds that answer from the pieces analysis
already judged with the one tie rule (tie_rule.py): each level's choice among every
measured config (the best-per-level table), the tier export's step count per level and
the static rule in the policy's shape. The CLI summary, `specsweep report`, the Prefect
artifacts, the plots and `policy export` render a `CellDecision`; none of them picks a
winner of its own.

- **deploy**: SGLang adaptive tiers where the variants allow it (static topk-1 chains of
  one family: the engine runs each level's own step count) and no level chose another
  algorithm, else, where the levels chose more than one algorithm, the rule by level
  ("A up to c=4, then B up to c=16, then no speculation": one server runs one algorithm,
  so each range is its own server), else the static rule "X up to c=N, then no
  speculation", else no speculation;
- **per level**: what the deployed config runs there (the measured variant that stands
  for it), and its measured effect against no speculation and against SGLang's default
  tiers where those were measured;
- **pivots**: where each speculative variant stops beating no speculation (pivot.py),
  computed once here and rendered by every view;
- **verdict**: decided, or the cells that need more measurement (a level the tie rule
  left open, with the interval's width).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import pandas as pd

from specsweep.analysis.adaptive_export import TierExport
from specsweep.analysis.levels import adaptive_mask, baseline_name, cell, interval_tables
from specsweep.analysis.levels import metric_table as _metric_table
from specsweep.analysis.params import TIE_MARGIN
from specsweep.analysis.pivot import Pivot
from specsweep.analysis.policy import Policy
from specsweep.analysis.tie_rule import LevelJudgment
from specsweep.results.intervals import Interval, ratio

DeployKind = Literal["tiers", "static", "by-level", "none"]
HEADLINE_COLUMNS = 100


@dataclass(frozen=True)
class LevelEffect:
    """What the deployed config runs at one measured level, and what that buys."""

    concurrency: int
    runs: str  # the measured variant that stands for the deployed config here
    steps: int | None  # its draft steps (0: no speculation); None for a non-chain variant
    throughput: Interval
    vs_baseline: Interval  # runs / no speculation (exactly 1 where it is the baseline)
    vs_default: Interval | None = None  # runs / SGLang's default tiers, where measured

    @property
    def speculates(self) -> bool:
        return self.steps != 0


@dataclass(frozen=True)
class OpenCell:
    """A level whose choice more measurement could still change."""

    concurrency: int
    choice: str
    rival: str
    rival_ratio: Interval

    def text(self) -> str:
        """``c=2 (+5.3% ±15%)``: the rival's measured lead and its interval's half-width."""
        r = self.rival_ratio
        half = (r.hi - r.lo) / 2 / r.value if r.known and r.value and math.isfinite(r.hi) else None
        return f"c={self.concurrency} ({r.value - 1:+.1%}" + (f" ±{half:.0%})" if half else ")")

    def sentence(self) -> str:
        r = self.rival_ratio
        return (
            f"at c={self.concurrency} {self.rival} leads {self.choice} by {r.value - 1:+.1%}"
            + (f" (95%: {r.lo - 1:+.1%} to {r.hi - 1:+.1%})" if r.known else "")
            + ": more than the tie margin, but its interval reaches below it"
        )


@dataclass(frozen=True)
class Deployable:
    """The config to deploy for one cell."""

    kind: DeployKind
    rule: str  # the config in words: "SGLang adaptive tiers 1:[2] 5:[0]", "X up to c=4, ..."
    effects: tuple[LevelEffect, ...]
    variant: str | None = None  # static: X; tiers: the chains' base variant
    up_to: int | None = None  # the highest level that runs speculation
    switch_at: float | None = None  # where speculation stops (interpolated crossing), if it does
    sglang_json: str | None = None  # tiers: the --speculative-adaptive-config file
    command: str | None = None  # the exact server command, where the run's config rebuilds it
    notes: tuple[str, ...] = ()
    # by-level: each speculative segment's variant and its exact server command
    commands: tuple[tuple[str, str], ...] = ()

    def effect_at(self, concurrency: int) -> LevelEffect | None:
        return next((e for e in self.effects if e.concurrency == concurrency), None)

    def runs_at(self) -> dict[int, str]:
        """Level -> the measured variant the deployed config runs there."""
        return {e.concurrency: e.runs for e in self.effects}


@dataclass(frozen=True)
class CellDecision:
    """One (GPU kind, load shape) cell's decision: see the module docstring."""

    run_id: str
    gpu_kind: str | None
    shape: str | None
    baseline: str | None
    judgments: tuple[LevelJudgment, ...]  # each level's choice among every measured config
    deploy: Deployable
    open_cells: tuple[OpenCell, ...]
    tie_margin: float = TIE_MARGIN
    label: str | None = None  # how the views name the cell ("in512-out256", "1x H200")
    # variant -> where it stops beating no speculation (pivot.py), in the legend's order
    pivots: Mapping[str, Pivot] = field(default_factory=dict)

    @property
    def decided(self) -> bool:
        return not self.open_cells

    @property
    def verdict(self) -> str:
        return "decided" if self.decided else "needs more measurement"

    def choice_at(self) -> dict[int, str]:
        """Level -> the config the tie rule chose there among everything measured."""
        return {j.concurrency: j.choice for j in self.judgments}

    def judgment(self, concurrency: int) -> LevelJudgment | None:
        return next((j for j in self.judgments if j.concurrency == concurrency), None)

    # ---- the headline: at most three lines of HEADLINE_COLUMNS ------------------------
    def headline(self) -> list[str]:
        """What to deploy, what it measured, and the verdict: three lines, each within
        HEADLINE_COLUMNS (longer lists are summarised, never cut mid-word)."""
        at = f"At {self.label}: " if self.label else ""
        lines = [_fit(f"{at}Deploy {self.deploy.rule}.")]
        lines.append(_fit(self.effect_line()))
        lines.append(_fit(self.verdict_line()))
        return lines

    def effect_line(self) -> str:
        effects = self.deploy.effects
        if not effects:
            return "Measured: nothing completed."
        if self.baseline is None:
            return "Measured: no baseline, so no effect against no speculation."
        full = "Measured vs no speculation: " + _effects_text(effects, short=False) + "."
        if len(full) <= HEADLINE_COLUMNS:
            return full
        return "Measured vs no speculation: " + _effects_text(effects, short=True) + "."

    def verdict_line(self) -> str:
        if self.decided:
            ties = [j for j in self.judgments if j.status == "tie"]
            text = f"Decided: every level clears the {self.tie_margin:.0%} tie margin"
            return text + (" or ties within it (the simplest runs)." if ties else ".")
        cells = [c.text() for c in self.open_cells]
        text = "Not decided: measure more at "
        shown: list[str] = []
        for i, c in enumerate(cells):
            more = len(cells) - i - 1
            tail = f" (+{more} more)" if more else ""
            candidate = text + "; ".join([*shown, c]) + tail + "."
            if len(candidate) > HEADLINE_COLUMNS and shown:
                return text + "; ".join(shown) + f" (+{len(cells) - len(shown)} more)."
            shown.append(c)
        return text + "; ".join(shown) + "."

    def level_sentences(self) -> list[str]:
        """One sentence per level that is not clear: ties said once, open levels named."""
        return [j.sentence() for j in self.judgments if j.status != "clear"]


@dataclass(frozen=True)
class RunDecision:
    """A run's decisions: one per (GPU kind, shape) cell, flat, in the run's order."""

    run_id: str
    cells: tuple[CellDecision, ...] = field(default_factory=tuple)

    @property
    def first(self) -> CellDecision | None:
        return self.cells[0] if self.cells else None

    @property
    def decided(self) -> bool:
        return all(c.decided for c in self.cells)

    def cell(self, gpu_kind: str | None = None, shape: str | None = None) -> CellDecision:
        for c in self.cells:
            if (gpu_kind is None or c.gpu_kind == gpu_kind) and (shape is None or c.shape == shape):
                return c
        raise KeyError(f"no decision for GPU kind {gpu_kind!r} at shape {shape!r}")


def _fit(line: str) -> str:
    """A headline line within HEADLINE_COLUMNS, cut at a word with an ellipsis if need be."""
    if len(line) <= HEADLINE_COLUMNS:
        return line
    cut = line[: HEADLINE_COLUMNS - 1].rsplit(" ", 1)[0]
    return cut + "…"


def _pct(r: Interval) -> str:
    return f"{r.value - 1:+.0%}"


def _effects_text(effects: Sequence[LevelEffect], short: bool) -> str:
    """'+47% at c=1, +22% at c=2, ±0 from c=8'; short: '+3% to +47% at c=1..4, ±0 from c=8'."""
    spec = [e for e in effects if e.speculates]
    rest = [e for e in effects if not e.speculates]
    parts: list[str] = []
    if spec and short:
        values = sorted(e.vs_baseline.value for e in spec)
        span = (
            f"c={spec[0].concurrency}"
            if len(spec) == 1
            else (f"c={spec[0].concurrency}..{spec[-1].concurrency}")
        )
        low, high = f"{values[0] - 1:+.0%}", f"{values[-1] - 1:+.0%}"
        parts.append(f"{low} at {span}" if low == high else f"{low} to {high} at {span}")
    else:
        parts += [f"{_pct(e.vs_baseline)} at c={e.concurrency}" for e in spec]
    if rest:
        zero = [e for e in rest if e.vs_baseline.value == 1.0]
        others = [e for e in rest if e not in zero]
        if zero:
            first = zero[0].concurrency
            contiguous = [e.concurrency for e in effects if e.concurrency >= first]
            if [e.concurrency for e in zero] == contiguous:
                parts.append(f"±0 from c={first} (no speculation)")
            else:
                parts.append("±0 at " + ", ".join(f"c={e.concurrency}" for e in zero))
        parts += [f"{_pct(e.vs_baseline)} at c={e.concurrency} (steps 0)" for e in others]
    return ", ".join(parts)


# ---- building it ------------------------------------------------------------------------


def _default_tiers(levels: pd.DataFrame) -> str | None:
    """The variant that ran SGLang's own default tiers (adaptive, no config), if measured."""
    if "adaptive_config" not in levels.columns:
        return None
    mask = adaptive_mask(levels) & levels["adaptive_config"].isna()
    names = levels.loc[mask, "variant"].unique()
    return str(names[0]) if len(names) else None


def _effects(
    levels: pd.DataFrame, runs: dict[int, tuple[str, int | None]], base: str | None
) -> tuple[LevelEffect, ...]:
    table = _metric_table(levels, "output_throughput")
    if table.empty:
        return ()
    lo, hi = interval_tables(levels, "output_throughput")
    default = _default_tiers(levels)
    out = []
    for c, (variant, steps) in sorted(runs.items()):
        if c not in table.index or variant not in table.columns or pd.isna(table.at[c, variant]):
            continue
        mine = cell(table, lo, hi, c, variant)
        if base is None or base not in table.columns or pd.isna(table.at[c, base]):
            vs_base = Interval(math.nan)
        elif variant == base:
            vs_base = Interval(1.0, 1.0, 1.0)
        else:
            vs_base = ratio(mine, cell(table, lo, hi, c, base))
        vs_default = None
        if default is not None and default in table.columns and pd.notna(table.at[c, default]):
            vs_default = ratio(mine, cell(table, lo, hi, c, default))
        out.append(LevelEffect(c, variant, steps, mine, vs_base, vs_default))
    return tuple(out)


def _steps_of(levels: pd.DataFrame, variant: str, base: str | None) -> int | None:
    """A static rule's variant's draft steps (a chain's num_steps; None for a tree or an
    algorithm without steps), 0 for the baseline."""
    if variant == base:
        return 0
    rows = levels[levels["variant"] == variant]
    if rows.empty or "num_steps" not in rows.columns or pd.isna(rows["num_steps"].iloc[0]):
        return None
    topk = rows["topk"].iloc[0] if "topk" in rows.columns else None
    chain = topk is None or pd.isna(topk) or int(topk) == 1
    return int(rows["num_steps"].iloc[0]) if chain else None


def tiers_json(config: dict[str, object]) -> str:
    """The tier file as JSON, one tier a line (what a person copies into a file)."""
    keys = sorted(config, key=int)
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(config[k])}" for k in keys)
    return "{\n" + body + "\n}"


def _tiers_deploy(
    levels: pd.DataFrame, export: TierExport, base: str | None, command: str | None
) -> Deployable:
    runs = {}
    for band in export.bands:
        for c in band.levels:
            runs[c] = (band.variant, band.steps)
    effects = _effects(levels, runs, base)
    zero = next((e for e in export.edges if e.to_steps == 0), None)
    spec = [c for c, (_, s) in runs.items() if s]
    config = {k: v for k, v in export.sglang_config().items() if k.isdigit()}
    return Deployable(
        kind="tiers",
        rule=f"SGLang adaptive {export.adaptive_spec().describe()} ({export.family.algorithm} "
        f"chains{', spec v2' if export.family.spec_v2 else ''})",
        effects=effects,
        variant=export.built_from[-1] if export.built_from else None,
        up_to=max(spec) if spec else None,
        switch_at=zero.crossing if zero is not None else None,
        sglang_json=tiers_json(config),
        command=command,
        notes=tuple(t.describe() for t in export.near_ties) + export.notes,
    )


def _static_deploy(levels: pd.DataFrame, policy: Policy | None, base: str | None) -> Deployable:
    if policy is None or policy.variant is None or base is None:
        table = _metric_table(levels, "output_throughput")
        runs = {int(c): (base, 0) for c in table.index} if base is not None else {}
        return Deployable(
            kind="none",
            rule="no speculation: speculation wins at no measured level beyond the tie margin",
            effects=_effects(levels, runs, base),
            notes=(policy.tie_note,) if policy is not None and policy.tie_note else (),
        )
    table = _metric_table(levels, "output_throughput")
    x, n = policy.variant, policy.up_to
    assert n is not None
    runs = {int(c): ((x, _steps_of(levels, x, base)) if c <= n else (base, 0)) for c in table.index}
    rule = f"{x} up to c={n}, then no speculation" if policy.next_level else f"{x} at every level"
    commands = levels.loc[levels["variant"] == x, "server_command"].dropna()
    return Deployable(
        kind="static",
        rule=rule,
        effects=_effects(levels, runs, base),
        variant=x,
        up_to=n,
        switch_at=policy.switch_crossing(),
        command=str(commands.iloc[0]) if len(commands) else None,
        notes=(policy.tie_note,) if policy.tie_note else (),
    )


def _algorithm_of(levels: pd.DataFrame, base: str | None) -> dict[str, str]:
    """Speculative variant -> its algorithm (EAGLE3, NGRAM, ...); NEXTN is sglang's EAGLE.
    Rows without one (files before the column) name no algorithm."""
    if "algorithm" not in levels.columns:
        return {}
    rows = levels[(levels["variant"] != base) & levels["algorithm"].notna()]
    rows = rows.drop_duplicates("variant")
    return {
        str(v): "EAGLE" if str(a).upper() == "NEXTN" else str(a).upper()
        for v, a in zip(rows["variant"], rows["algorithm"], strict=True)
    }


def _foreign_choices(
    judgments: Mapping[int, LevelJudgment], export: TierExport, algorithms: Mapping[str, str]
) -> dict[int, str]:
    """Levels whose choice is a variant of another algorithm than the tiers' chains: SGLang's
    adaptive tiers cannot run it there (they switch step counts of one chain family)."""
    family = export.family.algorithm.upper()
    family = "EAGLE" if family == "NEXTN" else family
    return {
        c: j.choice
        for c, j in judgments.items()
        if j.choice in algorithms and algorithms[j.choice] != family
    }


def _segments(choices: Mapping[int, str]) -> list[tuple[str, list[int]]]:
    """Consecutive levels with the same choice, in level order."""
    out: list[tuple[str, list[int]]] = []
    for c in sorted(choices):
        if out and out[-1][0] == choices[c]:
            out[-1][1].append(c)
        else:
            out.append((choices[c], [c]))
    return out


def by_level_rule(choices: Mapping[int, str], base: str | None) -> str:
    """'ngram-w10-d8 up to c=4, then eagle3-s3-k1-d4 up to c=16, then no speculation'."""
    segments = _segments(choices)
    parts = []
    for i, (variant, cs) in enumerate(segments):
        name = "no speculation" if variant == base else variant
        last = i == len(segments) - 1
        parts.append(name if last and variant == base else f"{name} up to c={cs[-1]}")
    return ", then ".join(parts)


def _by_level_deploy(
    levels: pd.DataFrame,
    judgments: Mapping[int, LevelJudgment],
    policy: Policy | None,
    base: str,
    pivots: Mapping[str, Pivot],
    refused_tiers: str | None,
) -> Deployable:
    """Each level runs its own choice: the levels chose more than one algorithm, and one
    SGLang server runs one algorithm (it cannot switch algorithms by load)."""
    choices = {c: j.choice for c, j in judgments.items()}
    runs = {c: (v, _steps_of(levels, v, base)) for c, v in choices.items()}
    spec = [c for c, v in choices.items() if v != base]
    segments = _segments(choices)
    switch_at = None
    if len(segments) > 1 and segments[-1][0] == base and segments[-2][0] in pivots:
        lo, hi = segments[-2][1][-1], segments[-1][1][0]
        downs = [x for x, d in pivots[segments[-2][0]].crossings if d == "down" and lo <= x <= hi]
        switch_at = downs[0] if downs else None
    commands = []
    for variant, _ in segments:
        rows = levels.loc[levels["variant"] == variant, "server_command"].dropna()
        if variant != base and len(rows) and variant not in dict(commands):
            commands.append((variant, str(rows.iloc[0])))
    notes = [
        "one SGLang server runs one speculative algorithm and cannot switch it by load: serve "
        "each range of concurrency with its own server"
        + (f"; with one server, {policy.rule()}" if policy is not None and policy.variant else "")
    ]
    if refused_tiers:
        notes.append(refused_tiers)
    return Deployable(
        kind="by-level",
        rule="by level: " + by_level_rule(choices, base),
        effects=_effects(levels, runs, base),
        variant=policy.variant if policy is not None else None,
        up_to=max(spec) if spec else None,
        switch_at=switch_at,
        notes=tuple(notes),
        commands=tuple(commands),
    )


def decide(
    levels: pd.DataFrame,
    run_id: str,
    policy: Policy | None,
    export: TierExport | None,
    judgments: dict[int, LevelJudgment],
    *,
    gpu_kind: str | None = None,
    shape: str | None = None,
    label: str | None = None,
    command: str | None = None,
    tie_margin: float = TIE_MARGIN,
    pivots: Mapping[str, Pivot] | None = None,
) -> CellDecision:
    """The cell's decision from its answer rows and what the one tie rule judged on them:
    `judgments` (every level among every config), `export` (tiers, where the variants
    allow them) and `policy` (the static rule). `command`: the tiers' exact server
    command where the run's config rebuilds it."""
    base = baseline_name(levels) if len(levels) else None
    algorithms = _algorithm_of(levels, base)
    chosen = {algorithms[j.choice] for j in judgments.values() if j.choice in algorithms}
    refused_tiers = None
    if export is not None and (foreign := _foreign_choices(judgments, export, algorithms)):
        at: dict[str, list[str]] = {}
        for c, v in sorted(foreign.items()):
            at.setdefault(v, []).append(str(c))
        where = "; ".join(f"{v} (chosen at c={', '.join(cs)})" for v, cs in at.items())
        refused_tiers = (
            f"SGLang adaptive tiers of the {export.family.algorithm} chains are not deployed: "
            f"they switch step counts of one chain family and cannot run {where}"
        )
        export = None
    if export is not None:
        deploy = _tiers_deploy(levels, export, base, command)
        opens = tuple(
            OpenCell(t.concurrency, t.chosen, t.judgment.rival or t.best, t.judgment.rival_ratio)
            for t in export.near_ties
            if t.open
        )
    else:
        if len(chosen) > 1 and base is not None:
            deploy = _by_level_deploy(levels, judgments, policy, base, pivots or {}, refused_tiers)
        else:
            deploy = _static_deploy(levels, policy, base)
            if refused_tiers:
                deploy = replace(deploy, notes=(*deploy.notes, refused_tiers))
        opens = tuple(
            OpenCell(j.concurrency, j.choice, j.rival or j.best, j.rival_ratio)
            for j in judgments.values()
            if j.status == "open"
        )
    return CellDecision(
        run_id=run_id,
        gpu_kind=gpu_kind,
        shape=shape,
        baseline=base,
        judgments=tuple(judgments[c] for c in sorted(judgments)),
        deploy=deploy,
        open_cells=opens,
        tie_margin=tie_margin,
        label=label,
        pivots=dict(pivots or {}),
    )
