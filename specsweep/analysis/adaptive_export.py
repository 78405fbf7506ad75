"""Policy export: a run's static chains and baseline as an SGLang adaptive tier config.

SGLang (0.5.11+, ``--speculative-adaptive-config FILE``) picks the speculative step
count per running batch size: the batch is padded *up* to a captured decode CUDA-graph
size, then routed to the closest tier key at or below the padded size. A tier with one
candidate never moves, so a measured answer becomes ``{"1": {"candidate_steps": [3]},
"12": {"candidate_steps": [1]}, "20": {"candidate_steps": [0]}}`` (0 = no drafting).

The rules (docs/analysis.md, "Policy export"):

- candidates: the baseline (steps 0) and the static chains of one family (EAGLE/EAGLE3/
  NEXTN, topk 1, not adaptive; same algorithm, draft model, spec v2, extra args, env;
  one variant per step count). ``variants`` picks the chains when a run holds several
  families. Tree variants (topk > 1) cannot be expressed; where one beat the choice it
  is reported with its measured gain.
- per level c: the one tie rule (analysis/tie_rule.py) over the step counts measured
  there, on the levels' 95% intervals: the best, unless its lead's interval reaches below
  ``1 + tie_margin`` over others; then the fewest steps among the tied (0 first). A level
  it leaves open (more steps measured beyond the margin, the interval reaching below it)
  keeps the choice and is named with the interval's width (`near_ties`), never refused
  and never set to 0 silently.
- bands of equal choice; between adjacent levels c_i < c_j with choices a != b the edge
  x is where the measured curves cross: T(b)/T(a) interpolated linearly in log2(c) to 1
  (as analysis/pivot.py). When they do not cross there (a near-tie decided one side),
  the edge is where the ratio comes closest to 1 on the segment: the line's crossing
  clamped into [c_i, c_j], i.e. the end nearer to a tie. Without both curves at both
  levels, the midpoint in log2(c).
- the tier key is the smallest captured CUDA-graph size >= x: a batch padded to that
  size runs that graph's cost, so it belongs to the size's side of the crossing. It is
  raised, when needed, above c_i's own padded size, so every measured level routes to
  the tier chosen for it (measurements beat interpolation). Two levels that pad to one
  size cannot be told apart: the later choice wins and, when that empties a band, the
  note says it vanished. Above max_bs nothing is padded and the key is ceil(x).
- max_bs: the run's max_running_requests when recorded (sglang captures no graph
  above it), else 256 (the largest cuda_graph_max_bs sglang picks by default).
Every number is measured; nothing is predicted.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd

from specsweep.analysis.levels import adaptive_mask, ok_levels
from specsweep.analysis.params import TIE_MARGIN
from specsweep.analysis.tie_rule import LevelJudgment, Option, judge_level
from specsweep.config.adaptive import ADAPTIVE_ALGORITHMS, AdaptiveSpec
from specsweep.config.command import LOG_MS_ENV
from specsweep.errors import PolicyExportRefused
from specsweep.results.intervals import Interval

DEFAULT_MAX_BS = 256
PADDING_NOTE = (
    "sglang pads the running batch up to a captured CUDA-graph batch size (with speculation "
    "1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8, then step 16, and max_bs), then uses the "
    "tier with the closest key at or below the padded size; keys are such capture sizes"
)


def decode_cuda_graph_batch_sizes(max_bs: int) -> list[int]:
    """The decode batch sizes sglang captures with speculation on, up to and with max_bs."""
    if max_bs < 1:
        raise ValueError(f"max_bs must be >= 1, got {max_bs}")
    steps = [(1, 9, 1), (10, 33, 2), (40, 65, 4), (72, 257, 8), (272, max_bs + 1, 16)]
    sizes = sorted({b for lo, hi, by in steps for b in range(lo, hi, by) if b <= max_bs})
    return sizes if sizes[-1] == max_bs else [*sizes, max_bs]


def pad_batch(batch: int, capture: Sequence[int] | None) -> int:
    """The captured size a batch runs at (itself above the largest, or without graphs)."""
    if not capture:
        return batch
    sizes = sorted(capture)
    i = bisect.bisect_left(sizes, batch)
    return sizes[i] if i < len(sizes) else batch


def route(tier_keys: Sequence[int], batch: int, capture: Sequence[int] | None) -> int:
    """The tier key sglang uses for a batch: pad it, then the closest key <= the padded size
    (the lowest key when every key is above it)."""
    keys = sorted(tier_keys)
    i = bisect.bisect_right(keys, pad_batch(batch, capture)) - 1
    return keys[max(0, i)]


def _snap(x: float, capture: Sequence[int]) -> int:
    """The smallest captured size >= x; ceil(x) above them (not padded)."""
    i = bisect.bisect_left(capture, x)
    return capture[i] if i < len(capture) else math.ceil(x)


def _size_after(size: int, capture: Sequence[int]) -> int:
    i = bisect.bisect_right(capture, size)
    return capture[i] if i < len(capture) else size + 1


# ---- row classification, shared with adaptive_verify -----------------------------------


def pinned_zero_mask(rows: pd.DataFrame) -> pd.Series:
    """Adaptive rows whose every tier is [0]: sglang's speculative worker drafting nothing,
    the one thing a tier config runs where the baseline wins (a reference, not a policy)."""
    if "adaptive_config" not in rows.columns:
        return pd.Series(False, index=rows.index)
    return adaptive_mask(rows) & rows["adaptive_config"].map(_all_zero)


def _all_zero(config: Any) -> bool:
    if not isinstance(config, str) or not config:
        return False
    try:
        tiers = [v for k, v in json.loads(config).items() if k.isdigit()]
    except (TypeError, ValueError, AttributeError):
        return False
    return bool(tiers) and all(set(t.get("candidate_steps", [])) == {0} for t in tiers)


def static_spec_mask(rows: pd.DataFrame) -> pd.Series:
    return ~rows["is_baseline"].astype(bool) & ~adaptive_mask(rows)


def chain_mask(rows: pd.DataFrame) -> pd.Series:
    """Static chains a tier config can run: EAGLE/EAGLE3/NEXTN, topk 1, num_steps >= 1."""
    algo = rows["algorithm"].fillna("").astype(str).str.upper()
    return (
        static_spec_mask(rows)
        & algo.isin(ADAPTIVE_ALGORITHMS)
        & rows["topk"].eq(1)
        & rows["num_steps"].fillna(0).ge(1)
    )


def tree_mask(rows: pd.DataFrame) -> pd.Series:
    return static_spec_mask(rows) & rows["topk"].fillna(0).gt(1)


def row_cv(rows: pd.DataFrame) -> pd.Series:
    """CV of output throughput across repeats; NaN when measured once (unknown, not 0)."""
    return rows["output_throughput_cv"].where(rows["repeats"].fillna(1) > 1)


def run_max_bs(rows: pd.DataFrame) -> tuple[int, str]:
    """(max_bs, where it came from): the largest max_running_requests recorded, else 256."""
    col = rows["max_running_requests"] if "max_running_requests" in rows.columns else None
    if col is not None and col.notna().any():
        return int(col.max()), "the run's max_running_requests"
    return DEFAULT_MAX_BS, f"max_running_requests not recorded: sglang's usual {DEFAULT_MAX_BS}"


def _canonical(text: Any, empty: str) -> str:
    if text is None or (isinstance(text, float) and math.isnan(text)) or text == "":
        return empty
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(text)


def steps_text(steps: int) -> str:
    return "no speculation" if steps == 0 else f"{steps} step" + ("s" if steps != 1 else "")


def levels_text(levels: Sequence[int]) -> str:
    return f"c={levels[0]}" if len(levels) == 1 else f"c={levels[0]}..{levels[-1]}"


# ---- the export -------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainFamily:
    """What a tier config shares with the chains it came from (the adaptive variant's setup)."""

    algorithm: str
    draft_model_path: str | None
    spec_v2: bool
    extra_args: str  # canonical JSON list
    env: str  # canonical JSON object

    def describe(self) -> str:
        text = f"{self.algorithm} draft {self.draft_model_path or '(none)'}"
        text += " spec-v2" if self.spec_v2 else ""
        text += f" args {self.extra_args}" if self.extra_args != "[]" else ""
        return text + (f" env {self.env}" if self.env != "{}" else "")


@dataclass(frozen=True)
class Band:
    levels: tuple[int, ...]  # consecutive measured levels with this choice
    steps: int
    variant: str  # the static variant measured there (the baseline for 0)
    throughput: tuple[float, ...]  # its output tok/s at those levels
    tied: tuple[int, ...] = ()  # levels where a near-tie decided the choice


@dataclass(frozen=True)
class Edge:
    low: int  # the last level of the band below
    high: int  # the first level of the band above
    from_steps: int
    to_steps: int
    crossing: float  # x, a batch size
    crosses: bool  # the measured curves cross between low and high
    key: int  # the tier key (a captured size)
    how: str  # one line: why x and the key are where they are


@dataclass(frozen=True)
class NearTie:
    """A level the tie rule did not decide clearly: a tie, resolved to fewer steps, or an
    open level (a config with more steps measured beyond the margin, but its interval
    reaches below it), named with its width, never set to 0 silently."""

    concurrency: int
    chosen: str
    chosen_steps: int
    best: str
    best_steps: int
    judgment: LevelJudgment

    @property
    def open(self) -> bool:
        return self.judgment.status == "open"

    def describe(self) -> str:
        j = self.judgment
        if self.open:
            return (
                f"at c={self.concurrency} {j.rival} leads {self.chosen} by "
                f"{j.rival_ratio.value - 1:+.1%}, but its 95% interval is {j.width():.1%} wide "
                f"and reaches below the {j.margin:.0%} margin: "
                f"{steps_text(self.chosen_steps)} until measured more"
            )
        return (
            f"at c={self.concurrency} {self.best} and {self.chosen} tie within "
            f"{j.margin:.0%}: {steps_text(self.chosen_steps)}"
        )


@dataclass(frozen=True)
class TreeWin:
    variant: str
    concurrency: int
    gain: float  # T(tree) / T(choice) - 1


@dataclass(frozen=True, eq=False)
class TierExport:
    """The measured answer as sglang adaptive tiers, with the bands and edges behind it."""

    run_id: str | None
    family: ChainFamily
    baseline: str
    built_from: tuple[str, ...]
    tiers: dict[int, int]  # tier key (batch size) -> steps
    bands: tuple[Band, ...]
    edges: tuple[Edge, ...]
    near_ties: tuple[NearTie, ...]
    tree_wins: tuple[TreeWin, ...]
    notes: tuple[str, ...]
    max_bs: int
    shape: str | None = None  # the load shape it was measured at (sglang's tiers key on batch only)

    def choices(self) -> pd.DataFrame:
        """Per measured level: concurrency, steps, variant, throughput, tied (near-tie)."""
        return pd.DataFrame(
            [(c, b.steps, b.variant, t, c in b.tied) for b in self.bands
             for c, t in zip(b.levels, b.throughput, strict=True)],
            columns=["concurrency", "steps", "variant", "throughput", "tied"],
        )  # fmt: skip

    @property
    def capture(self) -> list[int]:
        return decode_cuda_graph_batch_sizes(self.max_bs)

    def sglang_config(self) -> dict[str, Any]:
        """The JSON object for --speculative-adaptive-config (sglang ignores `_specsweep`)."""
        out: dict[str, Any] = {
            str(k): {"candidate_steps": [int(s)]} for k, s in sorted(self.tiers.items())
        }
        out["_specsweep"] = {
            "run_id": self.run_id,
            "shape": self.shape,
            "built_from": list(self.built_from),
            "family": self.family.describe(),
            "max_bs": self.max_bs,
            "bands": [json.loads(json.dumps(asdict(b))) for b in self.bands],
            "edges": [asdict(e) for e in self.edges],
            "near_ties": [t.describe() for t in self.near_ties],
            "note": PADDING_NOTE,
            "notes": list(self.notes),
        }
        return out

    def adaptive_spec(self) -> AdaptiveSpec:
        return AdaptiveSpec(tiers={k: [s] for k, s in sorted(self.tiers.items())})

    def describe(self) -> list[str]:
        """Terminal lines: one per tier, then near-ties, tree variants and notes."""
        keys = sorted(self.tiers)
        at = f"; shape {self.shape}" if self.shape else ""
        lines = [
            f"tiers for {self.family.describe()} (run {self.run_id}{at}; max_bs {self.max_bs})"
        ]
        for i, key in enumerate(keys):
            steps = self.tiers[key]
            span = f"batch {key}-{keys[i + 1] - 1}" if i + 1 < len(keys) else f"batch {key}+"
            if i + 1 < len(keys) and keys[i + 1] - 1 == key:
                span = f"batch {key}"
            routed = [b for b in self.bands if b.steps == steps and self._routes(b, key)]
            why = "; ".join(
                f"{b.variant} best at {levels_text(b.levels)}"
                if not b.tied
                else f"{b.variant} at {levels_text(b.levels)}, tied with the best at "
                f"c={', '.join(map(str, b.tied))}"
                for b in routed
            )
            edge = next((e for e in reversed(self.edges) if e.key == key), None)
            text = f"{span}: {steps_text(steps)}" + (f" ({why})" if why else "")
            lines.append(text + (f"; from {key}: {edge.how}" if edge else ""))
        lines += [t.describe() for t in self.near_ties]
        return lines + list(self.notes)

    def _routes(self, band: Band, key: int) -> bool:
        return any(route(self.tiers, c, self.capture) == key for c in band.levels)


def _refuse(message: str) -> PolicyExportRefused:
    return PolicyExportRefused(f"cannot export a tier config: {message}")


def _family(row: pd.Series) -> ChainFamily:
    draft = row.get("draft_model_path")
    return ChainFamily(
        algorithm=str(row["algorithm"]).upper(),
        draft_model_path=None if pd.isna(draft) else str(draft),
        spec_v2=bool(row.get("spec_v2", False)),
        extra_args=_canonical(row.get("extra_args"), "[]"),
        env=_server_env(row.get("env")),
    )


def _server_env(text: Any) -> str:
    """The recorded env without what specsweep adds to adaptive servers for its own
    reading of the log (SGLANG_LOG_MS): the same setup, adaptive or static."""
    env = _canonical(text, "{}")
    try:
        values = json.loads(env)
    except ValueError:
        return env
    if isinstance(values, dict):
        values.pop(LOG_MS_ENV, None)
        return json.dumps(values, sort_keys=True, separators=(",", ":"))
    return env


def _candidates(ok: pd.DataFrame, variants: Sequence[str] | None) -> tuple[str, pd.DataFrame]:
    """(baseline label, chain rows of one family), or refused with the reason."""
    bases, chains = ok[ok["is_baseline"].astype(bool)], ok[chain_mask(ok)]
    if variants is not None:
        wanted = set(variants)
        unknown = sorted(wanted - set(ok["variant"]))
        if unknown:
            raise _refuse(f"variants {unknown} were not measured ok in this run")
        other = sorted(wanted - set(chains["variant"]) - set(bases["variant"]))
        if other:
            raise _refuse(
                f"{other} are not static topk-1 EAGLE/EAGLE3 chains; a tier config holds "
                "only step counts of one chain family (and 0, no speculation)"
            )
        chains = chains[chains["variant"].isin(wanted)]
        if wanted & set(bases["variant"]):
            bases = bases[bases["variant"].isin(wanted)]
    if bases.empty:
        raise _refuse(
            "no baseline was measured (ok) in this run; a tier config needs it to "
            "know where speculation stops paying: add the baseline and re-run"
        )
    if bases["variant"].nunique() > 1:
        names = sorted(bases["variant"].unique())
        raise _refuse(
            f"several baselines were measured ({', '.join(names)}): name one in `variants`"
        )
    if chains.empty:
        trees = sorted(ok.loc[tree_mask(ok), "variant"].unique())
        if trees:
            raise _refuse(
                f"only tree variants (topk > 1: {', '.join(trees)}) were measured; sglang's "
                "adaptive mode runs chains (topk 1) only: measure topk-1 chains (e.g. a step "
                "sweep) and export again"
            )
        raise _refuse("no static topk-1 EAGLE/EAGLE3 chain was measured (ok) in this run")
    families: dict[ChainFamily, list[tuple[int, str]]] = {}
    for (name, steps), row in chains.groupby(["variant", "num_steps"]).first().iterrows():
        families.setdefault(_family(row), []).append((int(steps), str(name)))
    dup = any(len({s for s, _ in v}) < len(v) for v in families.values())
    if len(families) > 1 or dup:
        listing = "; ".join(
            f"{fam.describe()}: {', '.join(n for _, n in sorted(v))}" for fam, v in families.items()
        )
        why = "several chain families" if len(families) > 1 else "one step count twice"
        raise _refuse(
            f"the run holds {why} ({listing}); a tier config picks step counts of "
            "one chain: pick its variants with `variants`"
        )
    return str(bases["variant"].iloc[0]), chains


def _choose(
    c: int, row: pd.Series, lo: pd.Series, hi: pd.Series, labels: dict[int, str], margin: float
) -> tuple[int, NearTie | None]:
    """The level's step count by the one tie rule (analysis/tie_rule.py): fewer steps are
    simpler, no speculation (0) the simplest."""
    options = [
        Option(str(int(s)), Interval(float(t), float(lo[s]), float(hi[s])), (int(s),))
        for s, t in row.items()
    ]
    judged = judge_level(c, options, margin)
    choice, best = int(judged.choice), int(judged.best)
    if judged.status == "clear":
        return choice, None
    named = replace(
        judged,
        choice=labels[choice],
        best=labels[best],
        tied=tuple(labels[int(t)] for t in judged.tied),
        rival=labels[int(judged.rival)] if judged.rival is not None else None,
        runner_up=labels[int(judged.runner_up)] if judged.runner_up is not None else None,
    )
    if judged.status == "tie" and choice == best:
        return choice, None  # the best is also the simplest: nothing to say
    return choice, NearTie(c, labels[choice], choice, labels[best], best, named)


def _edge(table: pd.DataFrame, lo: int, hi: int, a: int, b: int, capture: list[int]) -> Edge:
    r0, r1 = table.at[lo, b] / table.at[lo, a], table.at[hi, b] / table.at[hi, a]
    x0, x1 = math.log2(lo), math.log2(hi)
    if math.isnan(r0) or math.isnan(r1):
        x, crosses, how = 2 ** ((x0 + x1) / 2), False, "not both measured at both levels: "
        how += f"edge at the midpoint in log2(c), c≈{x:.3g}"
    elif r0 != r1 and (r0 - 1) * (r1 - 1) <= 0:
        x, crosses = 2 ** (x0 + (1 - r0) * (x1 - x0) / (r1 - r0)), True
        how = f"curves cross at c≈{x:.3g}"
    else:
        t = (1 - r0) / (r1 - r0) if r0 != r1 else 0.5
        x, crosses = 2 ** (x0 + min(1.0, max(0.0, t)) * (x1 - x0)), False
        how = f"curves do not cross between c={lo} and c={hi} (a near-tie decided): "
        how += f"closest at c≈{x:.3g}"
    key, floor, top = (
        _snap(x, capture),
        _size_after(pad_batch(lo, capture), capture),
        pad_batch(hi, capture),
    )
    if floor > top:
        key = top
        how += f"; c={lo} and c={hi} both run CUDA-graph size {top}: one tier serves both"
    elif key < floor:
        key = floor
        how += f", inside c={lo}'s CUDA-graph size {pad_batch(lo, capture)}: starts at {key}"
    elif key != x:
        how += f", padded up to the CUDA-graph size {key}"
    return Edge(lo, hi, a, b, float(x), crosses, key, how)


def export_adaptive(
    levels: pd.DataFrame,
    *,
    variants: Sequence[str] | None = None,
    tie_margin: float = TIE_MARGIN,
    max_bs: int | None = None,
) -> TierExport:
    """One run's measured best step count per level as sglang adaptive tiers.

    Raises PolicyExportRefused (with why and what to do) for: no baseline, no topk-1
    chain, several chain families, or no speculation chosen anywhere. A level the tie
    rule leaves open is exported with its choice and named (`near_ties`, with the
    interval's width). See the module docstring for the rules.
    """
    ok = ok_levels(levels)
    runs = sorted(ok["run_id"].unique()) if "run_id" in ok.columns else []
    if len(runs) > 1:
        raise _refuse(f"the levels hold several runs ({', '.join(runs)}): export one run")
    shapes = sorted(ok["shape"].dropna().unique()) if "shape" in ok.columns else []
    if len(shapes) > 1:
        raise _refuse(
            f"the levels hold several load shapes ({', '.join(shapes)}) and sglang's tiers key "
            "on batch size only: export one shape (specsweep policy export --shape <shape>)"
        )
    base, chains = _candidates(ok, variants)
    plain = ok[ok["variant"] == base]
    zero, notes = _steps_zero(ok, plain, chains)
    rows = pd.concat([zero.assign(_s=0), chains.assign(_s=chains["num_steps"])])
    rows = rows.assign(_s=rows["_s"].astype(int))
    labels = dict(zip(rows["_s"], rows["variant"], strict=False))
    table = rows.pivot_table(index="concurrency", columns="_s", values="output_throughput")
    lo, hi = (
        rows.pivot_table(index="concurrency", columns="_s", values=col, dropna=False)
        .reindex_like(table)
        .astype(float)
        if col in rows.columns
        else pd.DataFrame(math.nan, index=table.index, columns=table.columns)
        for col in ("output_throughput_lo", "output_throughput_hi")
    )
    usable = table[table[0].notna() & table.drop(columns=[0]).notna().any(axis=1)]
    if len(usable) < len(table):
        skipped = sorted(set(table.index) - set(usable.index))
        notes.append(f"levels {skipped} were left out: the baseline or every chain is missing")
    table, lo, hi = usable, lo.loc[usable.index], hi.loc[usable.index]
    choices, ties = {}, []
    for c, row in table.iterrows():
        row = row.dropna()
        choices[int(c)], tie = _choose(int(c), row, lo.loc[c], hi.loc[c], labels, tie_margin)
        ties += [tie] if tie else []
    lv = sorted(choices)
    plain_t = plain.groupby("concurrency")["output_throughput"].mean().reindex(table.index)
    gains = (table.drop(columns=[0]).max(axis=1) / plain_t - 1).round(4)
    if all(choices[c] == 0 for c in lv) or not (gains > tie_margin).any():
        raise _refuse(
            f"speculation never wins in this run (best chain vs the plain baseline: "
            f"{', '.join(f'c={c} {g:+.1%}' for c, g in gains.items())}; a gain whose 95% "
            f"interval reaches below {tie_margin:.0%} ties, and ties go to no speculation): "
            "run without it; there is nothing to export"
        )
    if max_bs is None:
        max_bs, source = run_max_bs(rows)
        notes.append(f"max_bs {max_bs} ({source})")
    capture = decode_cuda_graph_batch_sizes(max_bs)
    tied_at = {t.concurrency for t in ties}
    bands = tuple(
        Band(
            g,
            steps,
            labels[steps],
            tuple(float(table.at[c, steps]) for c in g),
            tuple(c for c in g if c in tied_at),
        )
        for steps, g in ((s, tuple(g)) for s, g in itertools.groupby(lv, key=choices.get))
    )
    edges = tuple(
        _edge(table, a.levels[-1], b.levels[0], a.steps, b.steps, capture)
        for a, b in itertools.pairwise(bands)
    )
    keys, tiers = [1, *(e.key for e in edges)], {}
    for key, nxt, band, after in zip(keys, [*keys[1:], 0], bands, [*bands[1:], None], strict=True):
        if key == nxt and after is not None:  # the next choice takes this key over
            notes.append(
                f"the band at {levels_text(band.levels)} ({band.variant}) vanished: its edges "
                f"both snap to key {key}, which runs {steps_text(after.steps)}"
            )
        elif not tiers or list(tiers.values())[-1] != band.steps:
            tiers[key] = band.steps
    if lv[0] > 1:
        notes.append(
            f"batch sizes below c={lv[0]} (the lowest measured level) get its tier: extrapolated"
        )
    notes.append(
        f"batches above c={lv[-1]} (the highest measured level) keep its tier: extrapolated"
    )
    wins = _tree_wins(ok, table, choices)
    for name in dict.fromkeys(w.variant for w in wins):
        where = ", ".join(f"{w.gain:+.1%} at c={w.concurrency}" for w in wins if w.variant == name)
        notes.append(
            f"a tier config cannot express {name}, which measured {where} over the exported "
            "steps (topk > 1: sglang's adaptive mode runs chains only)"
        )
    spec, trees = ok.loc[static_spec_mask(ok), "variant"], ok.loc[tree_mask(ok), "variant"]
    ignored = sorted(set(spec) - set(chains["variant"]) - set(trees))
    if ignored:
        notes.append(f"not used (other chain family or algorithm): {', '.join(ignored)}")
    if shapes:
        notes.append(
            f"measured at shape {shapes[0]}: sglang's tiers key on batch size only, and the "
            "best step count moves with context length; serve traffic of this shape with it"
        )
    return TierExport(
        run_id=str(runs[0]) if runs else None,
        family=_family(chains.iloc[0]),
        baseline=base,
        built_from=tuple(labels[s] for s in sorted(labels)),
        tiers=tiers,
        bands=bands,
        edges=edges,
        near_ties=tuple(ties),
        tree_wins=tuple(wins),
        notes=tuple(notes),
        max_bs=max_bs,
        shape=str(shapes[0]) if shapes else None,
    )


def _steps_zero(
    ok: pd.DataFrame, plain: pd.DataFrame, chains: pd.DataFrame
) -> tuple[pd.DataFrame, list[str]]:
    """The rows that stand for steps 0, and a note when they are not the plain baseline.

    Where the baseline wins, a tier config runs steps 0 inside the speculative worker,
    which still verifies and extends the draft model: measured (a pinned-0 variant of
    the chains' family), that is what the chains are compared with, so a chain that
    loses to a server without speculation but beats steps 0 in the engine keeps its
    tier. Unmeasured, the plain baseline stands for it (the export says so).
    """
    family = _family(chains.iloc[0])
    pinned = ok[pinned_zero_mask(ok)]
    pinned = pinned[[_family(r) == family for _, r in pinned.iterrows()]]
    if pinned.empty:
        return plain, [
            "steps 0 compared as a server without speculation (no pinned-0 variant measured): "
            "where a tier runs [0] the engine's own overhead comes on top; measure it with "
            "verify_policy.pinned_zero"
        ]
    name = str(pinned["variant"].iloc[0])
    pinned = pinned[pinned["variant"] == name]
    missing = plain[~plain["concurrency"].isin(pinned["concurrency"])]
    note = (
        f"steps 0 is the engine's own, measured by {name} (every tier [0]): chains are "
        "compared with what a tier [0] really runs, not with a server without speculation"
    )
    if not missing.empty:
        note += f"; at c={','.join(map(str, sorted(missing['concurrency'])))} the baseline"
    return pd.concat([pinned, missing]), [note]


def _tree_wins(ok: pd.DataFrame, table: pd.DataFrame, choices: dict[int, int]) -> list[TreeWin]:
    trees = ok[tree_mask(ok)]
    out = []
    for (name, c), t in (
        trees.groupby(["variant", "concurrency"])["output_throughput"].mean().items()
    ):
        if c in choices and t > table.at[c, choices[c]]:
            out.append(TreeWin(str(name), int(c), float(t / table.at[c, choices[c]] - 1)))
    return out
