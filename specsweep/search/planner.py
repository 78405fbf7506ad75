"""The next launch of an adaptive search, and when to stop.

Order: the baseline (every ratio needs it), then two seed chains (the fewest and the
most draft steps of the narrowest tree: the fit's anchors at both ends of the cost
curve), then any variant the model cannot predict, then, one at a time, the unmeasured
variant whose predicted upper bound beats the best measured throughput at some level by
the most. The search stops when no unmeasured variant's upper bound beats the best by
more than the margin, or when the budget is spent.

Everything is derived from what the run has stored (levels, requests, phase records) plus
the variants tried in this process, so a resumed run makes the same choices, and a fleet
asks again each time a host frees up (`pending`: submitted, not yet finished).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from specsweep.analysis.levels import answer_rows
from specsweep.config import SearchSpec, Variant
from specsweep.results.phases import held_seconds
from specsweep.results.schema import SCHEMA_VERSION
from specsweep.results.store import ResultsStore
from specsweep.search.model import Predicted, SpecModel
from specsweep.search.seeds import seeds

# A cell of the search: (shape, concurrency); a single-shape run has one shape.
Cell = tuple[str, int]


@dataclass(frozen=True)
class Standing:
    """One grid variant after a fit: launched or not, predicted where it can be."""

    variant: Variant
    launched: bool
    predicted: dict[Cell, Predicted] = field(default_factory=dict)
    upper: float = math.nan  # max over cells of predicted hi / best measured there
    at: Cell | None = None  # the cell of that maximum
    reason: str = ""  # why launched / not launched

    @property
    def predictable(self) -> bool:
        return bool(self.predicted)


@dataclass(frozen=True)
class SearchStep:
    """The search's move: launch a variant, wait for pending ones, or stop."""

    launch: Variant | None
    why: str
    done: bool  # True: stop launching (why says so); False with no launch: wait
    standings: list[Standing]
    fit_on: tuple[str, ...] = ()
    budget_spent: bool = False  # stopped (or stopping) because max_launches / minutes ran out


@dataclass(frozen=True)
class RunSoFar:
    """What a run has stored, read once per decision."""

    levels: pd.DataFrame  # every level row of the run (ok, failed, skipped)
    requests: pd.DataFrame | None
    phases: list[tuple[str, str | None, dict[str, float]]]

    @classmethod
    def read(cls, store: ResultsStore, run_id: str) -> RunSoFar:
        return cls(
            store.read_levels(run_id),
            store.read_requests(run_id),
            store.read_phase_files(run_id),
        )

    @property
    def launched(self) -> set[str]:
        """Variants whose server was started in this run (a phase record exists)."""
        return {variant for variant, _, _ in self.phases} | set(self.levels["variant"])

    def held_s(self, now: float | None = None, up: frozenset[str] = frozenset()) -> float:
        """Seconds the run's servers held their GPUs, every launch of every variant: the
        ones in `up` (in flight now) until now, a killed one's until its last level."""
        now = time.time() if now is None else now
        return sum(held_seconds(p, now if v in up else None) for v, _, p in self.phases)


# A measured lead counts (is not a near-tie) when its 95% lower bound clears 1 + margin; the
# lead's interval combines two measurements' (docs/metrics.md). A variant measured as
# noisily as the best must therefore lead by exp(sqrt(2) * h) beyond the margin, h the
# best's relative half-width, capped here so that a very noisy best cannot stop the search
# on its own (and set to 0 where the level has no interval).
RESOLUTION_CAP = 0.03


def shaped(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """Rows with a non-null `shape` ("" where a row cannot say: a single-shape run)."""
    if frame is None:
        return None
    if "shape" not in frame.columns:
        return frame.assign(shape="")
    if frame["shape"].isna().any():
        return frame.assign(shape=frame["shape"].fillna(""))
    return frame


def shapes_of(levels: pd.DataFrame) -> list[str]:
    """The shapes the run measured so far, in their first appearance ([""] before any)."""
    levels = shaped(levels)
    assert levels is not None
    return list(dict.fromkeys(levels["shape"])) or [""]


def cell_text(cell: Cell | None, multi: bool) -> str:
    if cell is None:
        return "?"
    return f"{cell[0]} c={cell[1]}" if multi and cell[0] else f"c={cell[1]}"


def best_measured(levels: pd.DataFrame) -> dict[Cell, tuple[float, str]]:
    """Per cell: the bar a variant must clear to change the answer there, before the
    margin (the highest measured output throughput, raised by what separates a lead from
    a near-tie at that cell's noise), and the variant that set it."""
    ok = shaped(answer_rows(levels))
    assert ok is not None
    ok = ok[ok["status"] == "ok"]
    out: dict[Cell, tuple[float, str]] = {}
    for (shape, c), rows in ok.groupby(["shape", "concurrency"]):
        top = rows.loc[rows["output_throughput"].idxmax()]
        value = float(top["output_throughput"])
        hi = top.get("output_throughput_hi")
        half = (float(hi) / value - 1.0) if hi is not None and not pd.isna(hi) else 0.0
        resolution = math.exp(math.sqrt(2.0) * min(max(half, 0.0), RESOLUTION_CAP))
        out[(str(shape), int(c))] = (value * resolution, str(top["variant"]))
    return out


def _complete(levels: pd.DataFrame, variant: str, cells: list[Cell]) -> bool:
    mine = levels[levels["variant"] == variant]
    done = set(zip(mine["shape"], mine["concurrency"].astype(int), strict=True))
    return set(cells) <= done


def _standing(
    v: Variant,
    launched: bool,
    models: dict[str, SpecModel | None],
    best: dict[Cell, tuple[float, str]],
    cells: list[Cell],
) -> Standing:
    predicted: dict[Cell, Predicted] = {}
    for shape, c in cells:
        model = models.get(shape)
        p = model.predict(v, c) if model is not None else None
        if p is not None:
            predicted[(shape, c)] = p
    ratios = {c: p.hi / best[c][0] for c, p in predicted.items() if c in best and best[c][0] > 0}
    if not ratios:
        return Standing(v, launched, predicted)
    at = max(ratios, key=lambda cell: (ratios[cell], -cell[1]))
    return Standing(v, launched, predicted, ratios[at], at)


def _outlook(s: Standing) -> str:
    multi = len({shape for shape, _ in s.predicted}) > 1
    return (
        f"upper bound {s.upper:.2f}x of a clear lead over the best measured at "
        f"{cell_text(s.at, multi)}"
    )


class _Models:
    """One model per shape (a shape changes the cost curve: fitted on its own cells)."""

    def __init__(self, levels: pd.DataFrame, requests: pd.DataFrame | None) -> None:
        ok = answer_rows(levels)
        shapes = shapes_of(levels)
        reqs = shaped(requests)
        if reqs is not None and len(shapes) > 0:  # requests from before shapes: the first
            reqs = reqs.assign(shape=reqs["shape"].replace("", shapes[0]))
        self.by_shape: dict[str, SpecModel | None] = {}
        for shape in shapes:
            rows = ok[ok["shape"] == shape]
            mine = None if reqs is None else reqs[reqs["shape"] == shape]
            self.by_shape[shape] = SpecModel.fit(rows, mine) if not rows.empty else None

    @property
    def blind(self) -> str | None:
        """Why the model has no acceptance to predict from (the first shape's), if so."""
        return next((m.blind for m in self.by_shape.values() if m and m.blind), None)

    @property
    def fit_on(self) -> tuple[str, ...]:
        names: dict[str, None] = {}
        for model in self.by_shape.values():
            names.update(dict.fromkeys(_fit_on(model)))
        return tuple(names)


def next_step(
    spec: SearchSpec,
    candidates: list[Variant],
    concurrency: list[int],
    so_far: RunSoFar,
    tried: set[str],
    pending: set[str] = frozenset(),  # type: ignore[assignment]
    now: float | None = None,
    shapes: list[str] | None = None,
) -> SearchStep:
    """The search's next move given what is stored; `tried`: variants launched by this
    process (not retried after a failure); `pending`: submitted on a fleet, not finished;
    `shapes`: the run's shape labels (default: those measured so far). Every comparison is
    per cell (shape, concurrency): a variant is worth launching if it can win any cell."""
    levels = shaped(so_far.levels)
    assert levels is not None
    shapes = list(shapes) if shapes else shapes_of(levels)
    cells = [(shape, c) for shape in shapes for c in concurrency]
    launched = so_far.launched | tried | set(pending)
    busy = set(pending)

    def fit() -> tuple[_Models | None, list[Standing]]:
        ok = answer_rows(levels)
        models = _Models(levels, so_far.requests) if not ok.empty else None
        best = best_measured(levels)
        by_shape = models.by_shape if models is not None else {}
        return models, [
            _standing(v, v.label in launched, by_shape, best, cells) for v in candidates
        ]

    # a variant this run started but did not finish (a crash, a lost host): finish it first
    for v in candidates:
        if (
            v.label in so_far.launched
            and v.label not in tried
            and v.label not in busy
            and not _complete(levels, v.label, cells)
        ):
            return SearchStep(v, "resumed: launched before, levels missing", False, [])

    base = next((v for v in candidates if v.is_baseline), None)
    measured_ok = set(levels.loc[levels["status"] == "ok", "variant"])
    if base is not None and base.label in tried - busy and base.label not in measured_ok:
        # every ratio needs it: launching more would measure what nothing can be compared to
        why = "stopped: the baseline measured no level, so no variant can be compared"
        return SearchStep(None, why, True, [])

    def budget_spent() -> str | None:
        started = len(launched)
        if spec.max_launches is not None and started >= spec.max_launches:
            return f"budget spent: max_launches {spec.max_launches} reached"
        if spec.max_server_minutes is not None:
            held = so_far.held_s(now, frozenset(busy)) / 60.0
            if held >= spec.max_server_minutes:
                return (
                    f"budget spent: the servers held their GPUs {held:.1f} min "
                    f"(max_server_minutes {spec.max_server_minutes:g})"
                )
        return None

    for v in seeds(candidates):
        if v.label in launched:
            continue
        if (spent := budget_spent()) is not None and not v.is_baseline:
            return _stop(spent, fit(), busy, budget=True)
        if v.is_baseline:
            return SearchStep(v, f"{v.label}: the reference every ratio needs", False, [])
        # once a speculative variant is measured the model predicts the next seed: kept
        spec_ok = levels[(levels["status"] == "ok") & ~levels["is_baseline"].astype(bool)]
        model, standings = fit() if not spec_ok.empty else (None, [])
        return SearchStep(v, f"{v.label}: a seed of the fit", False, standings, _fit_on(model))

    model, standings = fit()
    if not any(v.is_baseline and v.label in set(levels["variant"]) for v in candidates):
        if busy:
            return SearchStep(None, "waiting for the baseline", False, standings)
        return SearchStep(None, "stopped: the baseline has no measured level", True, standings)
    open_ = [s for s in standings if not s.launched]
    if (spent := budget_spent()) is not None:
        return _stop(spent, (model, standings), busy, budget=True)
    blind = [s for s in open_ if not s.predictable]
    why_blind = f" (searching blind: {model.blind})" if model and model.blind else ""
    if blind:
        s = blind[0]
        return SearchStep(
            s.variant, f"{s.variant.label}: the model cannot predict it{why_blind}", False,
            standings, _fit_on(model),
        )  # fmt: skip
    if open_:
        top = max(open_, key=lambda s: s.upper)  # first in grid order on a tie
        if top.upper > 1.0 + spec.margin:
            return SearchStep(
                top.variant, f"{top.variant.label}: {_outlook(top)}", False, standings,
                _fit_on(model),
            )  # fmt: skip
    if busy:
        return SearchStep(None, "waiting for the variants in flight", False, standings)
    highest = max(open_, key=lambda s: s.upper) if open_ else None
    why = (
        f"no unmeasured variant's upper bound leads the best measured by more than "
        f"{spec.margin:.0%} at any level"
        + (f" (highest: {highest.variant.label}, {_outlook(highest)})" if highest else "")
        + why_blind
    )
    return SearchStep(None, why, True, standings, _fit_on(model))


def _fit_on(model: SpecModel | _Models | None) -> tuple[str, ...]:
    return tuple(model.fit_on) if model is not None else ()


def _stop(
    why: str,
    fitted: tuple[_Models | None, list[Standing]],
    busy: set[str],
    *,
    budget: bool = False,
) -> SearchStep:
    model, standings = fitted
    if busy:
        why = f"{why}; waiting for the variants in flight"
        return SearchStep(None, why, False, standings, budget_spent=budget)
    return SearchStep(None, why, True, standings, _fit_on(model), budget_spent=budget)


def not_launched_reason(s: Standing, stop: str, budget_spent: bool = False) -> str:
    """Why a grid variant was not launched, in the answer's words (`stop`: the search's
    reason to stop; `budget_spent`: it stopped because its budget ran out)."""
    if not s.predictable:
        return f"not launched ({stop}); the model cannot predict it"
    if budget_spent:
        return f"not launched: {stop}; its {_outlook(s)}"
    multi = len({shape for shape, _ in s.predicted}) > 1
    return (
        f"predicted at most {s.upper:.2f}x of a clear lead over the best at every "
        f"{'cell' if multi else 'level'} (95% upper bounds; closest at {cell_text(s.at, multi)})"
    )


def prediction_rows(
    run_id: str,
    target: str,
    stage: str,
    standings: list[Standing],
    fit_on: tuple[str, ...],
    reasons: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows of the predictions table (results/schema.py PREDICTIONS_SCHEMA)."""
    now = datetime.now(UTC)
    rows = []
    for s in standings:
        v = s.variant
        for (shape, c), p in sorted(s.predicted.items()):
            rows.append(
                {
                    "schema_version": SCHEMA_VERSION,
                    "run_id": run_id,
                    "target": target,
                    "stage": stage,
                    "variant": v.label,
                    "num_steps": v.resolved_num_steps,
                    "topk": v.resolved_topk,
                    "num_draft_tokens": v.resolved_num_draft_tokens,
                    "concurrency": c,
                    "shape": shape or None,
                    "predicted_output_throughput": p.value,
                    "predicted_lo": p.lo,
                    "predicted_hi": p.hi,
                    "predicted_accept_length": p.accept_length,
                    "launched": s.launched,
                    "reason": (reasons or {}).get(v.label, s.reason),
                    "fit_on": json.dumps(list(fit_on)),
                    "made_at": now,
                }
            )
    return rows


def record_launch(store: ResultsStore, run_id: str, target: str, step: SearchStep) -> None:
    """Keep the launched variant's prediction from before its launch (the first one only:
    a resumed search does not overwrite what the model said then)."""
    if step.launch is None or store.has_prediction(run_id, target, step.launch.label):
        return
    chosen = [s for s in step.standings if s.variant.label == step.launch.label]
    rows = prediction_rows(run_id, target, "before_launch", chosen, step.fit_on, {
        step.launch.label: step.why,
    })  # fmt: skip
    if rows:
        store.write_predictions(run_id, target, step.launch.label, rows)


def record_final(store: ResultsStore, run_id: str, target: str, step: SearchStep) -> None:
    """Every grid variant predicted from all the run's measurements; the not-launched ones
    with the reason they were not launched."""
    reasons = {
        s.variant.label: "launched"
        if s.launched
        else not_launched_reason(s, step.why, step.budget_spent)
        for s in step.standings
    }
    final = [Standing(s.variant, s.launched, s.predicted, s.upper, s.at) for s in step.standings]
    rows = prediction_rows(run_id, target, "final", final, step.fit_on, reasons)
    if rows:
        store.write_predictions(run_id, target, None, rows)
