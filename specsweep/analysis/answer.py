"""Everything a run answers, computed once: the input of the report, the CLI and the artifacts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pandas as pd

from specsweep.analysis.adaptive_export import TierExport, export_adaptive
from specsweep.analysis.adaptive_verify import Verification, parse_shares, verify_adaptive
from specsweep.analysis.baselines import kind_frames
from specsweep.analysis.decision import CellDecision, RunDecision, decide
from specsweep.analysis.deploy_command import tiers_command
from specsweep.analysis.hosts import HostComparison, compare_hosts, gpu_kind_warning
from specsweep.analysis.levels import (
    adaptive_mask,
    answer_rows,
    best_per_level,
    judge_levels,
    latency_table,
    metric_table,
)
from specsweep.analysis.params import LatencySLO, TrafficMix
from specsweep.analysis.pivot import Pivot, pivot_points
from specsweep.analysis.policy import Policy, speculation_policy
from specsweep.analysis.server_time import ServerTime, server_time
from specsweep.analysis.shapes import (
    CATEGORY_COLUMNS,
    CATEGORY_INPUTS,
    SURFACE_COLUMNS,
    category_table,
    shape_order,
    shape_rows,
    surface_table,
    verify_caps,
)
from specsweep.errors import PolicyExportRefused
from specsweep.results.schema import HOSTS_SCHEMA, PREDICTIONS_SCHEMA
from specsweep.results.store import ResultsStore

# Per-variant columns of the run's environment, in the order the report lists them.
VARIANT_FACTS = [
    "variant",
    "algorithm",
    "num_steps",
    "topk",
    "num_draft_tokens",
    "spec_v2",
    "adaptive",
    "adaptive_config",
    "draft_model_path",
    "max_running_requests",
    "server_command",
]
RUN_FACTS = [
    "target",
    "hostname",
    "gpu_host",
    "backend",
    "simulated",
    "sglang_version",
    "gpu_name",
    "gpu_count",
    "driver_version",
    "gpu_uuids",
    "model_path",
    "tp",
    "input_len",
    "output_len",
    "num_requests",
    "seed",
]

SKIPPED = "skipped"  # a level an adaptive search chose not to measure: neither ok nor failed
_SKIP_PREFIX = "skipped: "
_PARAMS = ["num_steps", "topk", "num_draft_tokens"]


def empty_predictions() -> pd.DataFrame:
    """The predictions table of a run without a search: no rows, every column."""
    return PREDICTIONS_SCHEMA.empty_table().to_pandas()


def failed_rows(levels: pd.DataFrame) -> pd.DataFrame:
    """Levels that were tried and failed: neither ok nor skipped by a search."""
    bad = ~levels["status"].isin(["ok", SKIPPED])
    return levels.loc[bad, ["variant", "concurrency", "error"]].reset_index(drop=True)


def skipped_rows(levels: pd.DataFrame) -> pd.DataFrame:
    """Levels a search did not measure: variant, concurrency, reason (its `error`, without
    the leading "skipped: " every view adds back in its own words)."""
    rows = levels[levels["status"] == SKIPPED]
    reasons = rows["error"].fillna("").astype(str).str.removeprefix(_SKIP_PREFIX)
    return (
        pd.DataFrame(
            {
                "variant": rows["variant"].to_numpy(),
                "concurrency": rows["concurrency"].to_numpy(),
                "reason": reasons.to_numpy(),
            }
        )
        .sort_values(["variant", "concurrency"])
        .reset_index(drop=True)
    )


def _bool(series: pd.Series) -> pd.Series:
    return series.astype("boolean").fillna(False).astype(bool)


@dataclass(frozen=True)
class SearchView:
    """What an adaptive search did and predicted, kept beside the measured answer and
    never mixed into it: every number here that is not in `levels` is a prediction.

    Built from the run's predictions table, its runs row's `search_stop` and its level rows;
    `present` is False for a run without a search, so no view shows an empty section.
    """

    predictions: pd.DataFrame  # PREDICTIONS_SCHEMA rows of the run (empty without a search)
    stop: str | None  # why the search stopped launching (runs.search_stop)
    levels: pd.DataFrame  # the answer's rows (answer_rows), every status
    best: pd.DataFrame  # best_per_level of the measured rows
    stored: pd.DataFrame | None = None  # every target's rows (prediction check per target)
    # variant (or variant@target) -> its phase record: the runs row's `phases`
    phases: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return (
            bool(len(self.predictions))
            or self.stop is not None
            or bool((self.levels["status"] == SKIPPED).any() if len(self.levels) else False)
        )

    @property
    def skipped_levels(self) -> pd.DataFrame:
        return skipped_rows(self.levels)

    def _stage(self, stage: str) -> pd.DataFrame:
        p = self.predictions
        return p[p["stage"] == stage] if len(p) else p

    def final(self) -> pd.DataFrame:
        """The final predictions, one row per (variant, concurrency): the latest made, when
        several targets each wrote theirs."""
        rows = self._stage("final")
        if rows.empty:
            return rows
        rows = rows.sort_values("made_at", na_position="first", kind="stable")
        return rows.drop_duplicates(["variant", "concurrency"], keep="last").reset_index(drop=True)

    def _measured_variants(self) -> set[str]:
        return set(self.levels["variant"]) if len(self.levels) else set()

    def grid_variants(self) -> list[str]:
        """Every variant the search chose among (final predictions and the launched ones)."""
        final = self.final()
        names = set(final["variant"]) | self._measured_variants()
        names |= set(self._stage("before_launch")["variant"]) if len(self.predictions) else set()
        return sorted(names)

    def launched_variants(self) -> list[str]:
        """Launched: measured (any status) or marked launched in the final predictions."""
        final = self.final()
        marked = set(final.loc[_bool(final["launched"]), "variant"]) if len(final) else set()
        return sorted(marked | self._measured_variants())

    def _best_measured(self) -> pd.Series:
        if self.best.empty or "best_throughput" not in self.best.columns:
            return pd.Series(dtype=float)
        return self.best.set_index("concurrency")["best_throughput"].astype(float)

    def not_launched_predictions(self) -> pd.DataFrame:
        """Final predictions of the variants not launched, each level with `ratio` and
        `ratio_hi`: predicted (and its upper bound) over the measured best there."""
        final = self.final()
        if final.empty:
            return final.assign(ratio=pd.Series(dtype=float), ratio_hi=pd.Series(dtype=float))
        launched = set(self.launched_variants())
        rows = final[~final["variant"].isin(launched)].copy()
        best = rows["concurrency"].map(self._best_measured())
        rows["ratio"] = rows["predicted_output_throughput"] / best
        rows["ratio_hi"] = rows["predicted_hi"] / best
        return rows.sort_values(["variant", "concurrency"]).reset_index(drop=True)

    def not_launched(self) -> pd.DataFrame:
        """One row per variant not launched, closest to the measured best first: variant,
        num_steps, topk, num_draft_tokens, best_ratio and best_at (its highest predicted
        throughput over the measured best, and where), upper_ratio and upper_at (the same
        for its 95% upper bound), reason (why the search did not launch it)."""
        cols = ["variant", *_PARAMS, "best_ratio", "best_at", "upper_ratio", "upper_at", "reason"]
        rows = self.not_launched_predictions()
        if rows.empty:
            return pd.DataFrame(columns=cols)
        out = []
        for variant, group in rows.groupby("variant", sort=False):
            rec: dict[str, Any] = {"variant": variant}
            first = group.iloc[0]
            rec.update({p: first[p] for p in _PARAMS})
            for key, col in (("best", "ratio"), ("upper", "ratio_hi")):
                known = group[group[col].notna()]
                top = known.loc[known[col].idxmax()] if len(known) else None
                rec[f"{key}_ratio"] = float(top[col]) if top is not None else float("nan")
                rec[f"{key}_at"] = int(top["concurrency"]) if top is not None else None
            reasons = group["reason"].dropna()
            rec["reason"] = str(reasons.iloc[0]) if len(reasons) else None
            out.append(rec)
        frame = pd.DataFrame(out, columns=cols)
        return frame.sort_values(
            ["best_ratio", "variant"], ascending=[False, True], na_position="last"
        ).reset_index(drop=True)

    def prediction_check(self) -> pd.DataFrame:
        """Each launched variant's before-launch prediction beside what was then measured:
        variant, target, concurrency, predicted, predicted_lo, predicted_hi, measured
        (output_throughput of an ok level, else NaN), status (ok, skipped, failed, or
        "not measured"), error (predicted / measured - 1: positive when the model
        over-predicted) and inside (the measurement fell in the 95% interval; None when
        there is no measurement). In launch order (when the prediction was made)."""
        cols = ["variant", "target", "concurrency", "predicted", "predicted_lo", "predicted_hi",
                "measured", "status", "error", "inside"]  # fmt: skip
        rows = self._stage("before_launch")
        if rows.empty:
            return pd.DataFrame(columns=cols)
        rows = rows.sort_values("made_at", na_position="last", kind="stable")
        rows = rows.drop_duplicates(["variant", "target", "concurrency"], keep="first")
        source = self.stored if self.stored is not None else self.levels
        measured = source[["variant", "target", "concurrency", "status", "output_throughput"]]
        measured = measured.drop_duplicates(["variant", "target", "concurrency"], keep="last")
        merged = rows.merge(measured, on=["variant", "target", "concurrency"], how="left")
        ok = merged["status"].eq("ok")
        value = merged["output_throughput"].where(ok).astype(float)
        predicted = merged["predicted_output_throughput"].astype(float)
        lo, hi = merged["predicted_lo"].astype(float), merged["predicted_hi"].astype(float)
        inside = [
            None if pd.isna(m) or pd.isna(a) or pd.isna(b) else bool(a <= m <= b)
            for m, a, b in zip(value, lo, hi, strict=True)
        ]
        order = {v: i for i, v in enumerate(dict.fromkeys(merged["variant"]))}
        out = pd.DataFrame(
            {
                "variant": merged["variant"],
                "target": merged["target"],
                "concurrency": merged["concurrency"].astype(int),
                "predicted": predicted,
                "predicted_lo": lo,
                "predicted_hi": hi,
                "measured": value,
                "status": merged["status"].fillna("not measured"),
                "error": predicted / value - 1.0,
                "inside": pd.Series(inside, dtype=object),
            }
        )
        out["_o"] = out["variant"].map(order)
        out = out.sort_values(["_o", "target", "concurrency"])
        return out[cols].reset_index(drop=True)

    def server_time(self) -> ServerTime | None:
        """The run's launches and server time beside its grid's (None: no phase records)."""
        rows = self.stored if self.stored is not None else self.levels
        return server_time(self.phases, rows, self.grid_variants())

    def check_summary(self) -> tuple[int, int, float]:
        """(levels measured after a prediction, of them inside its 95% interval, the median
        absolute error); (0, 0, NaN) when none."""
        check = self.prediction_check()
        done = check[check["measured"].notna() & check["predicted"].notna()]
        if done.empty:
            return 0, 0, float("nan")
        inside = int(sum(bool(x) for x in done["inside"] if x is not None))
        return len(done), inside, float(done["error"].abs().median())


def search_view(
    levels: pd.DataFrame,
    best: pd.DataFrame,
    predictions: pd.DataFrame | None = None,
    stop: str | None = None,
    stored: pd.DataFrame | None = None,
    phases: Mapping[str, Mapping[str, float]] | None = None,
) -> SearchView:
    """A SearchView of these rows (predictions None: none stored; phases: the run's phase
    records, store.read_phases)."""
    preds = empty_predictions() if predictions is None else predictions
    return SearchView(preds, stop, levels, best, stored, dict(phases or {}))


@dataclass(frozen=True)
class CellAnswer:
    """One (GPU kind, load shape) cell's answer. With several targets, `levels` holds one
    target per variant; `stored` keeps every row of the cell (all targets) and `hosts`
    compares the targets (None with one). `run_id`, `run`, `mix` and `slo` are what the
    cell was analysed with, the same in every cell of a run.
    """

    run_id: str
    levels: pd.DataFrame  # the rows the answer uses: levels.answer_rows of the stored ones
    run: dict[str, Any] | None  # its runs-table row (None for a run that never finished)
    throughput: pd.DataFrame  # concurrency x variant, output tok/s
    best: pd.DataFrame  # best_per_level
    latency: pd.DataFrame  # latency_table
    pivots: dict[str, Pivot]
    policy: Policy | None
    mix: TrafficMix
    slo: LatencySLO | None
    # The decision (analysis/decision.py): every view renders it; none re-derives a winner.
    decision: CellDecision
    gpu_kind: str | None = None  # None without a fleet's baseline plan (baselines.py)
    shape: str | None = None  # None for rows written before load shapes
    stored: pd.DataFrame | None = None  # the cell's rows as stored, every target
    hosts: HostComparison | None = None  # compare_hosts(stored): None for a single target
    export: TierExport | None = None  # the measured answer as sglang adaptive tiers
    export_refused: str | None = None  # why there is no export (None when there is one)
    verifications: tuple[Verification, ...] = ()  # each custom-tier adaptive variant, judged
    # A search's predictions at this cell (PREDICTIONS_SCHEMA; empty without a search):
    # never in the tables above, which are measured only; `search` shows them apart.
    predictions: pd.DataFrame = field(default_factory=empty_predictions)
    search_stop: str | None = None  # runs.search_stop: why the search stopped launching
    # this cell's rows per variant and prompt category (requests that carry one): shapes.py
    categories: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CATEGORY_COLUMNS))

    @property
    def workload(self) -> str | None:
        """What was sent (random-ids, builtin, jsonl:<file>, ...; several joined)."""
        if "workload" not in self.levels.columns:
            return None
        values = sorted(str(v) for v in self.levels["workload"].dropna().unique())
        return ", ".join(values) or None

    @cached_property
    def search(self) -> SearchView:
        """The search's outcome beside the answer (`.present` False without a search)."""
        phases = json.loads((self.run or {}).get("phases") or "{}")
        return SearchView(
            self.predictions, self.search_stop, self.levels, self.best, self.stored, phases
        )

    @property
    def has_search(self) -> bool:
        return self.search.present

    @property
    def skipped_levels(self) -> pd.DataFrame:
        """variant, concurrency, reason: levels the search chose not to measure."""
        return skipped_rows(self.levels)

    def not_launched(self) -> pd.DataFrame:
        return self.search.not_launched()

    def prediction_check(self) -> pd.DataFrame:
        return self.search.prediction_check()

    @property
    def has_adaptive(self) -> bool:
        return bool(adaptive_mask(self.levels).any())

    def steps_ran(self) -> pd.DataFrame:
        """What each adaptive server ran: variant, concurrency, {steps: share of time}."""
        if not self.has_adaptive:
            return pd.DataFrame(columns=["variant", "concurrency", "steps_share"])
        rows = self.levels[adaptive_mask(self.levels)]
        rows = rows[rows["status"] == "ok"]
        return pd.DataFrame(
            {
                "variant": rows["variant"].to_numpy(),
                "concurrency": rows["concurrency"].to_numpy(),
                "steps_share": [parse_shares(t) for t in rows.get("adaptive_steps_share", [])],
            }
        ).sort_values(["variant", "concurrency"], ignore_index=True)

    @property
    def gpu_kind_warning(self) -> str | None:
        """Set when the variants' curves come from GPUs of different kinds (see hosts.py);
        never with a baseline plan, whose answers are per kind."""
        return None if self.gpu_kind is not None else gpu_kind_warning(self.levels)

    @property
    def failed_levels(self) -> pd.DataFrame:
        """Levels tried and failed; a search's skipped levels are not failures."""
        return failed_rows(self.levels)

    @property
    def variant_errors(self) -> dict[str, str]:
        return json.loads((self.run or {}).get("variant_errors") or "{}")

    @property
    def simulated(self) -> bool:
        return bool(self.levels["simulated"].any()) if len(self.levels) else False

    def facts(self) -> dict[str, str]:
        """Run-wide environment: one value per column (distinct values joined when they vary)."""
        out: dict[str, str] = {"run_id": self.run_id}
        for col in RUN_FACTS:
            if col in self.levels.columns:
                values = self.levels[col].dropna().unique()
                if len(values) > 1 and pd.api.types.is_numeric_dtype(self.levels[col]):
                    out[col] = f"{values.min():g} to {values.max():g}"  # e.g. requests per level
                elif len(values):
                    out[col] = ", ".join(sorted(str(v) for v in values))
        for col in ("sweep_kind", "sweep_name", "specsweep_version", "git_revision", "status"):
            if self.run and self.run.get(col) is not None:
                out[f"run {col}" if col == "status" else col] = str(self.run[col])
        if self.run and self.run.get("started_at") is not None:
            out["started"] = f"{self.run['started_at']:%Y-%m-%d %H:%M:%S %Z}"
            ended = self.run.get("ended_at")  # None: interrupted, its `running` row kept
            out["ended"] = "not ended" if ended is None else f"{ended:%Y-%m-%d %H:%M:%S %Z}"
        return out

    def variants(self) -> pd.DataFrame:
        """One row per variant: its speculative parameters and exact server command."""
        cols = [c for c in VARIANT_FACTS if c in self.levels.columns]
        order = list(self.throughput.columns)
        table = self.levels.drop_duplicates("variant")[cols]
        rank = {v: i for i, v in enumerate(order)}
        return table.assign(_r=table["variant"].map(rank).fillna(len(rank))).sort_values("_r")[cols]

    def accept_length(self) -> pd.DataFrame:
        table = metric_table(self.levels, "accept_length")
        return table.dropna(axis=1, how="all") if not table.empty else table

    def config_json(self) -> str | None:
        text = (self.run or {}).get("config")
        return json.dumps(json.loads(text), indent=2, sort_keys=True) if text else None


@dataclass(frozen=True)
class RunAnswer:
    """One run's answer: a CellAnswer per (GPU kind, load shape), in the run's order (its
    GPU kinds in the order of their first hosts, each kind's shapes in the config's order),
    every cell's decision in `decisions`, and what spans the cells.

    The views show `first` (the first kind's first shape) on top and the other cells after
    it; none of them holds another answer.
    """

    run_id: str
    run: dict[str, Any] | None  # its runs-table row (None for a run that never finished)
    cells: tuple[CellAnswer, ...]
    decisions: RunDecision  # every cell's decision, in the order of `cells`
    stored: pd.DataFrame  # the run's rows as stored: every target, kind and shape
    # A search's predictions (PREDICTIONS_SCHEMA; empty without a search), all cells'.
    predictions: pd.DataFrame = field(default_factory=empty_predictions)
    search_stop: str | None = None  # runs.search_stop: why the search stopped launching
    # shape x concurrency over the first GPU kind's cells (empty with one shape)
    surface: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SURFACE_COLUMNS))
    # per shape, variant and prompt category (requests that carry one): see shapes.py
    categories: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CATEGORY_COLUMNS))
    # A fleet's baseline plan (HOSTS_SCHEMA rows; empty for one target or fleet.baseline
    # once): each GPU kind is then answered on its own cells (see baselines.py).
    host_plans: pd.DataFrame = field(default_factory=lambda: HOSTS_SCHEMA.empty_table().to_pandas())

    def __post_init__(self) -> None:
        if not self.cells:
            raise ValueError(f"run {self.run_id}: an answer needs at least one cell")

    @property
    def first(self) -> CellAnswer:
        """The cell every view shows on top: the first GPU kind's first shape."""
        return self.cells[0]

    @property
    def shapes(self) -> list[str]:
        """Every shape of the run, in order (one entry for a single-shape run)."""
        return list(dict.fromkeys(c.shape for c in self.cells if c.shape is not None))

    @property
    def gpu_kinds(self) -> list[str]:
        """Every GPU kind of a fleet's baseline plan, in order (empty without a plan)."""
        return list(dict.fromkeys(c.gpu_kind for c in self.cells if c.gpu_kind is not None))

    @property
    def multi_shape(self) -> bool:
        return len(self.shapes) > 1

    def cells_of(self, gpu_kind: str | None) -> tuple[CellAnswer, ...]:
        """One GPU kind's cells, shape by shape (gpu_kind None: a run without a plan)."""
        return tuple(c for c in self.cells if c.gpu_kind == gpu_kind)

    def cell(self, gpu_kind: str | None = None, shape: str | None = None) -> CellAnswer:
        """The first cell of this GPU kind and shape (None: any)."""
        for c in self.cells:
            if (gpu_kind is None or c.gpu_kind == gpu_kind) and (shape is None or c.shape == shape):
                return c
        raise KeyError(f"no answer for GPU kind {gpu_kind!r} at shape {shape!r}")


def analyze(
    levels: pd.DataFrame,
    run_id: str,
    run: dict[str, Any] | None = None,
    mix: TrafficMix | None = None,
    slo: LatencySLO | None = None,
    predictions: pd.DataFrame | None = None,
    categories: pd.DataFrame | None = None,
    host_plans: pd.DataFrame | None = None,
) -> RunAnswer:
    """The whole answer for one run's level rows (as stored: every target); `predictions`:
    the run's search predictions, shown apart (the answer is built from measured rows).

    Each load shape is answered on its own rows; with a fleet's baseline plan (`host_plans`,
    the hosts table) each GPU kind too, every speedup within a host or between calibrated
    hosts (baselines.py): one cell per (GPU kind, shape)."""
    frames = kind_frames(levels, host_plans)
    kinds: dict[str | None, pd.DataFrame | None] = {None: None} if frames is None else dict(frames)
    shapes = shape_order(levels, run)
    cats = categories if categories is not None else pd.DataFrame(columns=CATEGORY_COLUMNS)
    cells: list[CellAnswer] = []
    for i, (kind, chosen) in enumerate(kinds.items()):
        preds = predictions if i == 0 else None
        mine = _analyze_shapes(levels, chosen, shapes, run_id, run, mix, slo, preds, cats)
        named = kind if len(kinds) > 1 else None
        cells += [_labelled(c, kind, named, len(shapes) > 1) for c in mine]
    first = [c for c in cells if c.gpu_kind == cells[0].gpu_kind] if cells else []
    surface = surface_table({str(c.shape): c.best for c in first}) if len(shapes) > 1 else None
    return RunAnswer(
        run_id=run_id,
        run=run,
        cells=tuple(cells),
        decisions=RunDecision(run_id, tuple(c.decision for c in cells)),
        stored=levels,
        predictions=empty_predictions() if predictions is None else predictions,
        search_stop=(run or {}).get("search_stop"),
        surface=pd.DataFrame(columns=SURFACE_COLUMNS) if surface is None else surface,
        categories=cats,
        host_plans=HOSTS_SCHEMA.empty_table().to_pandas() if frames is None else host_plans,
    )


def _labelled(cell: CellAnswer, kind: str | None, named: str | None, shapes: bool) -> CellAnswer:
    """The cell of GPU kind `kind`, its decision named after what tells it apart: its GPU
    kind (`named`: several kinds), its shape (several shapes), or both."""
    parts = [p for p in (named, cell.shape if shapes else None) if p]
    decision = replace(cell.decision, label=", ".join(parts) or None, gpu_kind=kind)
    return replace(cell, gpu_kind=kind, decision=decision)


def _analyze_shapes(
    levels: pd.DataFrame,
    chosen: pd.DataFrame | None,
    shapes: list[str],
    run_id: str,
    run: dict[str, Any] | None,
    mix: TrafficMix | None,
    slo: LatencySLO | None,
    predictions: pd.DataFrame | None,
    cats: pd.DataFrame,
) -> list[CellAnswer]:
    """One cell per shape; `chosen`: the rows the answer uses (a GPU kind's); None:
    answer_rows of `levels`."""
    if len(shapes) <= 1:
        one = _analyze_shape(levels, run_id, run, mix, slo, predictions, chosen)
        return [replace(one, shape=shapes[0] if shapes else None, categories=cats)]

    def of(frame: pd.DataFrame | None, shape: str) -> pd.DataFrame | None:
        return None if frame is None else frame[frame["shape"] == shape]

    return [
        replace(
            _analyze_shape(
                of(levels, s), run_id, run, mix, slo,
                shape_rows(predictions, s, first=s == shapes[0]), of(chosen, s),
            ),
            shape=s,
            categories=cats[cats["shape"] == s] if not cats.empty else cats,
        )
        for s in shapes
    ]  # fmt: skip


def _analyze_shape(
    levels: pd.DataFrame,
    run_id: str,
    run: dict[str, Any] | None,
    mix: TrafficMix | None,
    slo: LatencySLO | None,
    predictions: pd.DataFrame | None,
    chosen: pd.DataFrame | None = None,
) -> CellAnswer:
    mix = mix or TrafficMix()
    stored, levels = levels, answer_rows(levels) if chosen is None else chosen
    export, refused = None, None
    try:
        export = export_adaptive(levels)
    except PolicyExportRefused as exc:
        refused = str(exc)
    best = best_per_level(levels, slo)
    policy = speculation_policy(levels, mix, slo)
    shapes = levels["shape"].dropna().unique() if "shape" in levels.columns else []
    pivots = pivot_points(levels)
    decision = decide(
        levels,
        run_id,
        policy,
        export,
        judge_levels(levels),
        shape=str(shapes[0]) if len(shapes) == 1 else None,
        command=tiers_command(run, export) if export is not None else None,
        pivots=pivots,
    )
    return CellAnswer(
        run_id=run_id,
        levels=levels,
        run=run,
        throughput=metric_table(levels, "output_throughput"),
        best=best,
        latency=latency_table(levels, slo),
        pivots=decision.pivots,
        policy=policy,
        mix=mix,
        slo=slo,
        stored=stored,
        hosts=compare_hosts(stored),
        export=export,
        export_refused=refused,
        verifications=tuple(verify_adaptive(levels)),
        predictions=empty_predictions() if predictions is None else predictions,
        search_stop=(run or {}).get("search_stop"),
        decision=decision,
    )


def analyze_run(
    store: ResultsStore,
    run_id: str | None = None,
    mix: TrafficMix | None = None,
    slo: LatencySLO | None = None,
) -> RunAnswer:
    """analyze() on a stored run (the latest when run_id is None)."""
    run_id = run_id or store.latest_run_id()
    if run_id is None:
        raise LookupError(f"no runs under {store.root}")
    levels = store.read_levels(run_id)
    if levels.empty:
        raise LookupError(f"run {run_id} has no level rows under {store.levels_dir}")
    run = store.read_run(run_id)
    requests = store.read_requests(run_id, columns=CATEGORY_INPUTS)
    return analyze(
        levels,
        run_id,
        run,
        mix,
        slo,
        store.read_predictions(run_id),
        category_table(requests, verify_caps(levels)),
        store.read_host_plans(run_id),
    )
