"""Decision verdicts: did tonight's answer move beyond its intervals since the last nights?

The nightly regression judges numbers; this judges what they decide. An sglang upgrade
(new default adaptive tiers, a faster kernel for the baseline) can leave every number
within its usual swing and still change the answer: another variant wins at c=8, a
variant's pivot halves, the recommended rule changes. Three kinds of decision are
compared between tonight's run and the previous runs of the same scope, the answer's
rows (levels.answer_rows) of one (target, model_path, input_len, output_len); a run
whose variants come from several targets is one scope with the targets comma-joined.
At most `RegressionPolicy.history_runs` earlier runs are looked at; each decision is
compared with the most recent of them that made it (measured that level, that variant,
had a policy).

- best: tonight's best variant at c differs from the previous best there, and tonight's
  lead of the new best over the old one has a 95% interval wholly above 1 + tie_margin
  (the test `best_per_level` uses for a near-tie: a near-tie is not a change);
- pivot: a variant's pivot kind changed (crosses / never / always / below_at_low), or
  both cross and their 95% ranges do not overlap. An inconclusive pivot, tonight's or
  the previous one, never counts as a move: it is reported as "unsure";
- policy: the rule's variant changed, or its threshold changed and tonight's interval of
  the gain vs always-baseline and the previous one separate ("no speculation" gains
  exactly 0).

Every comparison needs intervals: levels without them (files before schema 3) give
"unsure" where something differs, never "changed". Statuses: changed, within noise (it
differs, inside the intervals), unsure, same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specsweep.analysis.compare import environment_changes, run_changes
from specsweep.analysis.levels import answer_rows, best_per_level, interval_tables, metric_table
from specsweep.analysis.params import TIE_MARGIN, LatencySLO, RegressionPolicy, TrafficMix
from specsweep.analysis.pivot import Pivot, pivot_points
from specsweep.analysis.policy import Policy, speculation_policy
from specsweep.analysis.regression import run_order
from specsweep.results.intervals import Interval, ratio
from specsweep.results.store import ResultsStore

SCOPE_KEY = ["target", "model_path", "input_len", "output_len"]
BEST, PIVOT, POLICY = "best", "pivot", "policy"
CHANGED, WITHIN_NOISE, UNSURE, SAME = "changed", "within noise", "unsure", "same"
_MOVING = ("crosses", "never", "always", "below_at_low")


@dataclass(frozen=True)
class Decision:
    """One decision compared between tonight and the last run that made it."""

    kind: str  # best | pivot | policy
    subject: str  # "c=8", a variant, or "policy"
    before: str  # the previous run's decision, in words
    after: str  # tonight's
    status: str  # changed | within noise | unsure | same
    reason: str  # why that status, with the numbers
    run_id: str
    previous_run_id: str
    scope: dict[str, Any]  # target, model_path, input_len, output_len
    numbers: dict[str, Any] = field(default_factory=dict)  # the intervals behind it

    def describe(self) -> str:
        """One sentence: where, what it was, what it is, why it counts (or not)."""
        where = {BEST: f"best at {self.subject}", PIVOT: f"pivot of {self.subject}"}.get(
            self.kind, "policy"
        )
        after, before = (
            (f"'{self.after}'", f"'{self.before}'")
            if self.kind == POLICY
            else (self.after, self.before)
        )
        return (
            f"{where} ({self.scope['target']}) is now {after}, was {before} in run "
            f"{self.previous_run_id}: {self.reason}"
        )

    def record(self) -> dict[str, Any]:
        """JSON-ready, for the event payload and the flow's result."""
        return {
            "kind": self.kind,
            "subject": self.subject,
            "before": self.before,
            "after": self.after,
            "status": self.status,
            "run_id": self.run_id,
            "previous_run_id": self.previous_run_id,
            **{k: _plain(v) for k, v in self.scope.items()},
            "numbers": {k: _plain(v) for k, v in self.numbers.items()},
            "sentence": self.describe(),
        }


@dataclass(frozen=True)
class DecisionReport:
    """Tonight's decisions against the last nights'."""

    run_id: str
    decisions: tuple[Decision, ...]
    previous_run_ids: tuple[str, ...]  # the earlier runs looked at (oldest first)
    environment: dict[str, tuple[str, str]] = field(default_factory=dict)  # vs the last run
    tie_margin: float = TIE_MARGIN

    @property
    def changed(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.status == CHANGED)

    @property
    def unsure(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.status == UNSURE)

    @property
    def within_noise(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.status == WITHIN_NOISE)

    @property
    def moved(self) -> bool:
        return bool(self.changed)

    def frame(self) -> pd.DataFrame:
        """One row per decision (numbers flattened), for a notebook."""
        columns = [
            "kind", "subject", "before", "after", "status", "run_id", "previous_run_id",
            *SCOPE_KEY, "sentence",
        ]  # fmt: skip
        rows = []
        for d in self.decisions:
            record = d.record()
            rows.append({**{k: record[k] for k in columns}, **record["numbers"]})
        return pd.DataFrame(rows, columns=columns) if not rows else pd.DataFrame(rows)

    def headline(self) -> str:
        if not self.decisions:
            return f"run {self.run_id}: no earlier run to compare decisions with"
        counts: dict[str, int] = {}
        for d in self.decisions:
            counts[d.status] = counts.get(d.status, 0) + 1
        parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        status = "DECISION CHANGED" if self.moved else "decisions unchanged"
        return f"run {self.run_id}: {status} ({parts})"

    def message(self) -> str:
        """The headline, every changed decision with its numbers, then the unsure ones."""
        lines = [self.headline()]
        lines += [f"  {d.describe()}" for d in self.changed]
        lines += [f"  unsure: {d.describe()}" for d in self.unsure]
        if self.environment and self.decisions:
            lines.append("  changed since the previous run: " + _env_text(self.environment))
        return "\n".join(lines)

    def markdown(self) -> str:
        """For a Prefect artifact: what moved beyond its interval, then what could not tell."""
        lines = [f"## Decisions: {self.headline()}", ""]
        if not self.decisions:
            lines.append(
                "Nothing to compare: no earlier run of the same target, model and lengths."
            )
            return "\n".join(lines) + "\n"
        if self.changed:
            lines += [
                "Moved beyond their 95% intervals since the last nights "
                f"(tie margin {self.tie_margin:.0%}):",
                "",
                "| decision | subject | before | after | why | previous run |",
                "|---|---|---|---|---|---|",
            ]
            lines += [_table_row(d) for d in self.changed]
        else:
            lines.append(
                "No decision moved beyond its 95% interval: the best variant per level, the "
                "pivots and the policy are those of the last nights, or inside their noise."
            )
        for title, rows in (("Within noise", self.within_noise), ("Unsure", self.unsure)):
            if rows:
                lines += ["", f"{title}:", ""]
                lines += [f"- {d.describe()}" for d in rows]
        if self.environment:
            lines += ["", "Changed since the previous run:", ""]
            lines += [f"- `{k}`: {a} → {b}" for k, (a, b) in self.environment.items()]
        return "\n".join(lines) + "\n"

    def event_payload(self) -> dict[str, Any]:
        """JSON-ready details for `specsweep.decision.changed`."""
        return {
            "run_id": self.run_id,
            "summary": self.headline(),
            "kinds": sorted({d.kind for d in self.changed}),
            "changes": [d.record() for d in self.changed],
            "unsure": [d.record() for d in self.unsure],
            "environment_changes": {k: list(v) for k, v in self.environment.items()},
            "previous_run_ids": list(self.previous_run_ids),
            "tie_margin": self.tie_margin,
        }


def _table_row(d: Decision) -> str:
    cells = [d.kind, d.subject, d.before, d.after, d.reason, f"`{d.previous_run_id}`"]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _env_text(env: dict[str, tuple[str, str]]) -> str:
    return "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in env.items())


# ---- the answer of one run, computed once and only when asked --------------------------


class _Answer:
    """The three decisions of one run's scope, each computed on first use."""

    def __init__(
        self, rows: pd.DataFrame, mix: TrafficMix | None, slo: LatencySLO | None, margin: float
    ) -> None:
        self.rows, self.mix, self.slo, self.margin = rows, mix, slo, margin
        self._cache: dict[str, Any] = {}

    def _get(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    @property
    def best(self) -> pd.DataFrame:
        def make() -> pd.DataFrame:
            table = best_per_level(self.rows, self.slo, self.margin)
            return table.dropna(subset=["best_variant"]).set_index("concurrency")

        return self._get("best", make)

    @property
    def pivots(self) -> dict[str, Pivot]:
        return self._get("pivots", lambda: pivot_points(self.rows))

    @property
    def policy(self) -> Policy | None:
        def make() -> Policy | None:
            try:
                return speculation_policy(self.rows, self.mix, self.slo, self.margin)
            except ValueError:  # a traffic mix weighting a level this run did not measure
                return None

        return self._get("policy", make)

    def throughput(self, c: int, variant: str) -> Interval:
        table, lo, hi = self._get(
            "throughput",
            lambda: (
                metric_table(self.rows, "output_throughput"),
                *interval_tables(self.rows, "output_throughput"),
            ),
        )
        if c not in table.index or variant not in table.columns or pd.isna(table.at[c, variant]):
            return Interval(math.nan)
        return Interval(
            float(table.at[c, variant]), float(lo.at[c, variant]), float(hi.at[c, variant])
        )


def _scopes(rows: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """One run's answer rows per (targets, model_path, input_len, output_len)."""
    out = {}
    keys = SCOPE_KEY[1:]
    for key, group in rows.groupby(keys, dropna=False, sort=False):
        targets = ",".join(sorted({str(t) for t in group["target"].dropna()}))
        out[(targets, *key)] = group
    return out


# ---- the verdicts ------------------------------------------------------------------------


def _best_changes(now: _Answer, past: list[tuple[str, _Answer]], base: dict) -> list[Decision]:
    out = []
    margin = now.margin
    for c, row in now.best.iterrows():
        c = int(c)
        previous = next(((r, a) for r, a in past if c in a.best.index), None)
        if previous is None:
            continue
        prev_run, prev = previous
        before, after = str(prev.best.at[c, "best_variant"]), str(row["best_variant"])
        then = prev.throughput(c, before)
        numbers: dict[str, Any] = {
            "concurrency": c,
            "before_throughput_then": then.value,
            "before_lo_then": then.lo,
            "before_hi_then": then.hi,
            "after_throughput": float(row["best_throughput"]),
            "after_lo": float(row["best_lo"]),
            "after_hi": float(row["best_hi"]),
            "tie_margin": margin,
        }
        make = _maker(BEST, f"c={c}", before, after, prev_run, base, numbers)
        if before == after:
            out.append(make(SAME, "the same variant is best"))
            continue
        old = now.throughput(c, before)
        if math.isnan(old.value):
            out.append(make(UNSURE, f"{before} was not measured at c={c} tonight"))
            continue
        lead = ratio(now.throughput(c, after), old)
        numbers |= {
            "before_throughput": old.value,
            "before_lo": old.lo,
            "before_hi": old.hi,
            "lead": lead.value,
            "lead_lo": lead.lo,
            "lead_hi": lead.hi,
        }
        if not lead.known:
            out.append(
                make(UNSURE, f"it leads {before} {lead.value:.3f}x, without a 95% interval "
                     "(levels before schema 3): a flip cannot be told from noise")
            )  # fmt: skip
            continue
        text = f"tonight it leads {before} {lead.value:.3f}x (95%: {lead.lo:.3f} to {lead.hi:.3f})"
        if lead.lo >= 1.0 + margin:
            out.append(make(CHANGED, f"{text}, beyond the {margin:.0%} tie margin"))
        else:
            out.append(make(WITHIN_NOISE, f"{text}: a near-tie within the {margin:.0%} margin"))
    return out


def _pivot_numbers(p: Pivot, side: str) -> dict[str, Any]:
    return {
        f"kind_{side}": p.kind,
        f"pivot_{side}": p.concurrency,
        f"low_{side}": p.low,
        f"high_{side}": p.high,
    }


def _pivot_moves(now: _Answer, past: list[tuple[str, _Answer]], base: dict) -> list[Decision]:
    out = []
    for variant, after in now.pivots.items():
        previous = next(((r, a) for r, a in past if variant in a.pivots), None)
        if previous is None:
            continue
        prev_run, prev = previous
        before = prev.pivots[variant]
        numbers = {**_pivot_numbers(before, "before"), **_pivot_numbers(after, "after")}
        make = _maker(PIVOT, variant, before.describe(), after.describe(), prev_run, base, numbers)
        out.append(make(*_pivot_status(before, after)))
    return out


def _pivot_status(before: Pivot, after: Pivot) -> tuple[str, str]:
    if "inconclusive" in (before.kind, after.kind):
        which = "tonight's" if after.kind == "inconclusive" else "the previous"
        if before.kind == after.kind:
            which = "both"
        return UNSURE, f"{which} pivot is inconclusive: never counted as a move"
    both = before.intervals and after.intervals
    if before.kind != after.kind:
        if not both:
            return UNSURE, "the kind changed, but without 95% intervals (levels before schema 3)"
        return (
            CHANGED,
            f"{before.kind} -> {after.kind}, every level on its side beyond its interval",
        )
    if before.kind != "crosses":
        return SAME, f"{after.kind} both nights"
    ranges = None not in (before.low, before.high, after.low, after.high)
    if not (both and ranges):
        if before.concurrency == after.concurrency:
            return SAME, "the same crossing"
        return UNSURE, "the crossing moved, but without 95% ranges (levels before schema 3)"
    if after.high < before.low or after.low > before.high:
        direction = "down" if after.high < before.low else "up"
        return CHANGED, (
            f"moved {direction}: the 95% ranges c≈{before.low:.3g}-{before.high:.3g} and "
            f"c≈{after.low:.3g}-{after.high:.3g} do not overlap"
        )
    if before.concurrency == after.concurrency:
        return SAME, "the same crossing"
    return WITHIN_NOISE, (
        f"the 95% ranges c≈{before.low:.3g}-{before.high:.3g} and "
        f"c≈{after.low:.3g}-{after.high:.3g} overlap"
    )


def _gain(p: Policy) -> Interval:
    """The gain vs always-baseline with its 95% interval; exactly 0 without speculation."""
    if p.variant is None:
        return Interval(0.0, 0.0, 0.0)
    return Interval(p.gain_vs_baseline, p.gain_lo, p.gain_hi)


def _gain_text(g: Interval) -> str:
    if not g.known:
        return f"{g.value:+.1%}"
    if g.lo == g.hi:
        return f"{g.value:+.1%}"
    return f"{g.value:+.1%} (95%: {g.lo:+.1%} to {g.hi:+.1%})"


def _policy_change(now: _Answer, past: list[tuple[str, _Answer]], base: dict) -> list[Decision]:
    after = now.policy
    previous = next(((r, a.policy) for r, a in past if a.policy is not None), None)
    if after is None or previous is None:
        return []
    prev_run, before = previous
    g_before, g_after = _gain(before), _gain(after)
    numbers = {
        "variant_before": before.variant,
        "up_to_before": before.up_to,
        "gain_before": g_before.value,
        "gain_before_lo": g_before.lo,
        "gain_before_hi": g_before.hi,
        "variant_after": after.variant,
        "up_to_after": after.up_to,
        "gain_after": g_after.value,
        "gain_after_lo": g_after.lo,
        "gain_after_hi": g_after.hi,
        "throughput_before": before.throughput,
        "throughput_after": after.throughput,
    }
    make = _maker(POLICY, "policy", before.rule(), after.rule(), prev_run, base, numbers)
    gains = f"gain vs always-baseline {_gain_text(g_after)} tonight, {_gain_text(g_before)} then"
    if before.variant != after.variant:
        return [make(CHANGED, f"another variant; {gains}")]
    if before.up_to == after.up_to:
        return [make(SAME, f"the same rule; {gains}")]
    if not (g_before.known and g_after.known):
        return [make(UNSURE, f"another threshold; {gains}, without 95% intervals")]
    if g_after.hi < g_before.lo or g_after.lo > g_before.hi:
        return [make(CHANGED, f"another threshold; {gains}: the intervals separate")]
    return [make(WITHIN_NOISE, f"another threshold; {gains}: the intervals overlap")]


def _maker(
    kind: str, subject: str, before: str, after: str, prev_run: str, base: dict, numbers: dict
) -> Callable[[str, str], Decision]:
    def make(status: str, reason: str) -> Decision:
        return Decision(
            kind, subject, before, after, status, reason, base["run_id"], prev_run,
            base["scope"], dict(numbers),
        )  # fmt: skip

    return make


def judge_decisions(
    levels: pd.DataFrame,
    run_id: str,
    policy: RegressionPolicy | None = None,
    mix: TrafficMix | None = None,
    slo: LatencySLO | None = None,
    tie_margin: float = TIE_MARGIN,
    runs: dict[str, dict[str, Any]] | None = None,
) -> DecisionReport:
    """Tonight's best per level, pivots and policy against the last nights' (see module doc).

    `levels`: every run of a store; the previous runs are those before `run_id` (by their
    first measured level) of the same scope, at most `policy.history_runs` of them.
    `runs` (run id -> runs-table row) adds the code/config changes to the environment.
    """
    policy = policy or RegressionPolicy()
    runs = runs or {}
    levels = answer_rows(levels)
    order = run_order(levels)
    if run_id not in order:  # nothing measured tonight: no decision to compare
        return DecisionReport(run_id, (), (), {}, tie_margin)
    earlier = order[: order.index(run_id)]
    by_run = {r: rows for r, rows in levels.groupby("run_id", sort=False)}
    tonight = by_run[run_id]
    scopes_of: dict[str, dict[tuple, pd.DataFrame]] = {}
    decisions: list[Decision] = []
    looked: set[str] = set()
    for key, rows in _scopes(tonight).items():
        past: list[tuple[str, _Answer]] = []
        for r in reversed(earlier):
            if r not in scopes_of:
                scopes_of[r] = _scopes(by_run[r])
            if key in scopes_of[r]:
                past.append((r, _Answer(scopes_of[r][key], mix, slo, tie_margin)))
            if len(past) == policy.history_runs:
                break
        if not past:
            continue
        looked |= {r for r, _ in past}
        now = _Answer(rows, mix, slo, tie_margin)
        base = {"run_id": run_id, "scope": dict(zip(SCOPE_KEY, key, strict=True))}
        decisions += _best_changes(now, past, base)
        decisions += _pivot_moves(now, past, base)
        decisions += _policy_change(now, past, base)
    previous = [r for r in earlier if r in looked]
    environment: dict[str, tuple[str, str]] = {}
    if previous:
        environment = environment_changes(by_run[previous[-1]], tonight)
        environment.update(run_changes(runs.get(previous[-1]), runs.get(run_id)))
    return DecisionReport(run_id, tuple(decisions), tuple(previous), environment, tie_margin)


def judge_stored_decisions(
    store: ResultsStore,
    run_id: str,
    policy: RegressionPolicy | None = None,
    mix: TrafficMix | None = None,
    slo: LatencySLO | None = None,
    tie_margin: float = TIE_MARGIN,
) -> DecisionReport:
    """judge_decisions on a results store: every run's levels and the runs table."""
    levels = store.read_levels()
    ids = {*levels["run_id"].unique(), run_id} if not levels.empty else {run_id}
    runs = {r: store.read_run(r) for r in ids}
    return judge_decisions(
        levels, run_id, policy, mix, slo, tie_margin, {k: v for k, v in runs.items() if v}
    )
