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
from specsweep.results.schema import SCHEMA_VERSION
from specsweep.results.store import ResultsStore
from specsweep.search.model import Predicted, SpecModel
from specsweep.search.seeds import seeds


@dataclass(frozen=True)
class Standing:
    """One grid variant after a fit: launched or not, predicted where it can be."""

    variant: Variant
    launched: bool
    predicted: dict[int, Predicted] = field(default_factory=dict)
    upper: float = math.nan  # max over levels of predicted hi / best measured there
    at: int | None = None  # the level of that maximum
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

    def held_s(self, now: float | None = None) -> float:
        """Seconds the run's servers held their GPUs (a running one: until now)."""
        now = time.time() if now is None else now
        total = 0.0
        for _, _, p in self.phases:
            if "held_from_unix" in p:
                total += max(0.0, p.get("held_until_unix", now) - p["held_from_unix"])
        return total


# A measured lead counts (is not a near-tie) when its 95% lower bound clears 1 + margin; the
# lead's interval combines two measurements' (docs/metrics.md). A variant measured as
# noisily as the best must therefore lead by exp(sqrt(2) * h) beyond the margin, h the
# best's relative half-width, capped here so that a very noisy best cannot stop the search
# on its own (and set to 0 where the level has no interval).
RESOLUTION_CAP = 0.03


def best_measured(levels: pd.DataFrame) -> dict[int, tuple[float, str]]:
    """Per level: the bar a variant must clear to change the answer there, before the
    margin (the highest measured output throughput, raised by what separates a lead from
    a near-tie at that level's noise), and the variant that set it."""
    ok = answer_rows(levels)
    ok = ok[ok["status"] == "ok"]
    out: dict[int, tuple[float, str]] = {}
    for c, rows in ok.groupby("concurrency"):
        top = rows.loc[rows["output_throughput"].idxmax()]
        value = float(top["output_throughput"])
        hi = top.get("output_throughput_hi")
        half = (float(hi) / value - 1.0) if hi is not None and not pd.isna(hi) else 0.0
        resolution = math.exp(math.sqrt(2.0) * min(max(half, 0.0), RESOLUTION_CAP))
        out[int(c)] = (value * resolution, str(top["variant"]))
    return out


def _complete(levels: pd.DataFrame, variant: str, concurrency: list[int]) -> bool:
    done = set(levels.loc[levels["variant"] == variant, "concurrency"].astype(int))
    return set(concurrency) <= done


def _standing(
    v: Variant,
    launched: bool,
    model: SpecModel | None,
    best: dict[int, tuple[float, str]],
    concurrency: list[int],
) -> Standing:
    predicted: dict[int, Predicted] = {}
    if model is not None:
        for c in concurrency:
            p = model.predict(v, c)
            if p is not None:
                predicted[c] = p
    ratios = {c: p.hi / best[c][0] for c, p in predicted.items() if c in best and best[c][0] > 0}
    if not ratios:
        return Standing(v, launched, predicted)
    at = max(ratios, key=lambda c: (ratios[c], -c))
    return Standing(v, launched, predicted, ratios[at], at)


def _outlook(s: Standing) -> str:
    return f"upper bound {s.upper:.2f}x of a clear lead over the best measured at c={s.at}"


def next_step(
    spec: SearchSpec,
    candidates: list[Variant],
    concurrency: list[int],
    so_far: RunSoFar,
    tried: set[str],
    pending: set[str] = frozenset(),  # type: ignore[assignment]
    now: float | None = None,
) -> SearchStep:
    """The search's next move given what is stored; `tried`: variants launched by this
    process (not retried after a failure); `pending`: submitted on a fleet, not finished."""
    levels = so_far.levels
    launched = so_far.launched | tried | set(pending)
    busy = set(pending)

    def fit() -> tuple[SpecModel | None, list[Standing]]:
        ok = answer_rows(levels)
        model = SpecModel.fit(ok, so_far.requests) if not ok.empty else None
        best = best_measured(levels)
        return model, [
            _standing(v, v.label in launched, model, best, concurrency) for v in candidates
        ]

    # a variant this run started but did not finish (a crash, a lost host): finish it first
    for v in candidates:
        if (
            v.label in so_far.launched
            and v.label not in tried
            and v.label not in busy
            and not _complete(levels, v.label, concurrency)
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
            held = so_far.held_s(now) / 60.0
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
            return _stop(spent, fit(), busy)
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
        return _stop(spent, (model, standings), busy)
    blind = [s for s in open_ if not s.predictable]
    if blind:
        s = blind[0]
        return SearchStep(
            s.variant, f"{s.variant.label}: the model cannot predict it", False, standings,
            _fit_on(model),
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
    )
    return SearchStep(None, why, True, standings, _fit_on(model))


def _fit_on(model: SpecModel | None) -> tuple[str, ...]:
    return tuple(model.fit_on) if model is not None else ()


def _stop(why: str, fitted: tuple[SpecModel | None, list[Standing]], busy: set[str]) -> SearchStep:
    model, standings = fitted
    if busy:
        return SearchStep(None, f"{why}; waiting for the variants in flight", False, standings)
    return SearchStep(None, why, True, standings, _fit_on(model))


def not_launched_reason(s: Standing, stop: str) -> str:
    """Why a grid variant was not launched, in the answer's words."""
    if not s.predictable:
        return f"not launched ({stop}); the model cannot predict it"
    if stop.startswith("budget spent"):
        return f"not launched: {stop}; its {_outlook(s)}"
    return (
        f"predicted at most {s.upper:.2f}x of a clear lead over the best at every level "
        f"(95% upper bounds; closest at c={s.at})"
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
        for c, p in sorted(s.predicted.items()):
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
        s.variant.label: "launched" if s.launched else not_launched_reason(s, step.why)
        for s in step.standings
    }
    final = [Standing(s.variant, s.launched, s.predicted, s.upper, s.at) for s in step.standings]
    rows = prediction_rows(run_id, target, "final", final, step.fit_on, reasons)
    if rows:
        store.write_predictions(run_id, target, None, rows)
