"""A fleet sweep's baseline plan as it unfolds: which baseline runs to pin to which host,
when a calibration can be judged, and what changes when one fails or a host is lost.

`fleet.baseline` per_gpu_kind or every_host (docs/fleet.md). A host gets its role from
`analysis.baselines.initial_plan` when the sweep first sees its worker online; from then
on each event moves the plan, and every move is returned as a `Decision` for the flow to
carry out (submit pinned runs, judge calibrations, measure variants again, write the
hosts-table rows, log the sentences):

- a pinned run finishes: every calibration whose two sides are now measured is judged
  (the flow calls `analysis.baselines.calibrate` and hands the columns to `calibrated`);
- a calibration fails, or cannot be judged once both runs are over (a side measured
  nothing): the host measures its own full baseline, pinned to it;
- a pinned run is lost with its host: it cannot move (it measures that host). A lost
  reference hands its GPU kind to the next live host of the kind in fleet order (which
  measures a full baseline) and the kind's calibrated hosts are checked again against it;
  a host whose own baseline (or calibration) is lost has the variants it finished
  measured again elsewhere, since nothing on it can be compared with them;
- a lost host that finishes a run after all is planned again, as a host first seen.

No Prefect here: the sweep's state is the plan's, so every re-plan is tested without a
server (tests/unit/fleet/test_fleet_plan.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specsweep.analysis.baselines import (
    CALIBRATED,
    OWN,
    REFERENCE,
    HostRole,
    gpu_kind,
    initial_plan,
    plan_row,
)

FULL, CALIBRATION = "full", "calibration"  # what a pinned baseline run measures
PENDING, DONE, LOST = "pending", "done", "lost"  # where a pinned run is
PLANNED_MODES = ("per_gpu_kind", "every_host")


@dataclass(frozen=True)
class PinnedRun:
    """A baseline run that must measure `host`: every level (FULL) or the calibration
    level only (CALIBRATION)."""

    host: str
    purpose: str


@dataclass(frozen=True)
class Check:
    """Judge `host`'s calibration against `reference`: both sides are measured."""

    host: str
    reference: str


@dataclass
class Decision:
    """What the flow does after an event, in this order."""

    submit: list[PinnedRun] = field(default_factory=list)
    check: list[Check] = field(default_factory=list)
    rerun_from: list[str] = field(default_factory=list)  # hosts whose variants run again
    rows: list[str] = field(default_factory=list)  # hosts whose hosts-table row changed
    said: list[str] = field(default_factory=list)  # each decision in plain words

    def extend(self, other: Decision) -> Decision:
        self.submit += other.submit
        self.check += [c for c in other.check if c not in self.check]
        self.rerun_from += [h for h in other.rerun_from if h not in self.rerun_from]
        self.rows += [h for h in other.rows if h not in self.rows]
        self.said += other.said
        return self


@dataclass
class HostState:
    role: HostRole
    position: int  # its place in fleet.hosts
    facts: dict[str, Any] | None  # gpu_name, gpu_count, driver_version; None: unknown
    runs: dict[str, str] = field(default_factory=dict)  # FULL/CALIBRATION -> PENDING/DONE/LOST
    verdict: dict[str, Any] = field(default_factory=dict)  # calibrate()'s columns, latest
    lost: bool = False
    note: str | None = None  # replaces the verdict's note in the hosts table

    @property
    def kind(self) -> str | None:
        if not self.facts:
            return None
        return gpu_kind(self.facts.get("gpu_name"), self.facts.get("gpu_count"))


def calibration_sentence(host: str, reference: str, columns: Mapping[str, Any]) -> str:
    """`gpu-b: calibration at c=2: -19.8% vs gpu-a (95%: -24.1% to -15.3%; tolerance
    ±2%): measures its own baseline`."""
    c = columns.get("calibration_concurrency")
    value = columns.get("calibration_ratio")
    if columns.get("passed") is None or value is None or not math.isfinite(value):
        why = columns.get("note") or f"no baseline level at c={c} to compare"
        return f"{host}: calibration at c={c}: {why}: measures its own baseline"
    lo, hi = columns.get("calibration_lo"), columns.get("calibration_hi")
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        interval = f"95%: {lo - 1:+.1%} to {hi - 1:+.1%}"
    else:
        interval = "95% interval unbounded" if lo is not None else "no interval"
    tolerance = columns.get("tolerance")
    if tolerance is not None:
        interval += f"; tolerance ±{tolerance:.0%}"
    verdict = f"uses {reference}'s baseline" if columns["passed"] else "measures its own baseline"
    return f"{host}: calibration at c={c}: {value - 1:+.1%} vs {reference} ({interval}): {verdict}"


class BaselinePlan:
    """The hosts' roles and pinned baseline runs of one fleet sweep (per_gpu_kind or
    every_host; `once` needs no plan)."""

    def __init__(self, mode: str, order: Sequence[str]) -> None:
        if mode not in PLANNED_MODES:
            raise ValueError(f"fleet.baseline {mode!r} has no plan (one of {PLANNED_MODES})")
        self.mode = mode
        self.order = list(order)  # fleet.hosts' names: positions and the order of promotion
        self.hosts: dict[str, HostState] = {}
        self._asked: set[str] = set()  # checks handed out, not yet answered

    # --- views ---------------------------------------------------------------------------
    def role(self, host: str) -> HostRole:
        return self.hosts[host].role

    def in_flight(self) -> bool:
        """Whether a pinned baseline run is still to finish (a search waits for it)."""
        return any(PENDING in s.runs.values() for s in self.hosts.values())

    def pending(self, host: str) -> list[str]:
        """The purposes of `host`'s pinned runs still to finish."""
        return [p for p, state in self.hosts[host].runs.items() if state == PENDING]

    def references(self) -> dict[str, str]:
        """GPU kind -> its live reference host."""
        refs: dict[str, str] = {}
        for host in self._by_position():
            s = self.hosts[host]
            if s.role.role == REFERENCE and not s.lost and s.kind is not None:
                refs.setdefault(s.kind, host)
        return refs

    def row(self, run_id: str, host: str) -> dict[str, Any]:
        """The host's hosts-table row as the plan stands."""
        s = self.hosts[host]
        columns = dict(s.verdict)
        if s.note is not None:
            columns["note"] = s.note
        return plan_row(run_id, host, self.mode, s.role, s.position, s.facts, **columns)

    def _by_position(self) -> list[str]:
        return sorted(self.hosts, key=lambda h: self.hosts[h].position)

    # --- events ----------------------------------------------------------------------------
    def add(self, hosts: Iterable[str], facts: Mapping[str, Mapping[str, Any] | None]) -> Decision:
        """Plan the hosts not planned yet (those first seen online), in fleet order."""
        seen = set(hosts)
        new = [h for h in self.order if h in seen and h not in self.hosts]
        for host in new:
            found = facts.get(host)
            self.hosts[host] = HostState(
                HostRole(OWN, host), self.order.index(host), dict(found) if found else None
            )
        return self._plan(new)

    def finished(self, host: str, purpose: str) -> Decision:
        """A pinned run of `host` is over (completed, or failed as a variant fails: what it
        measured is stored); a lost host that finishes one is back, and planned again."""
        s = self.hosts[host]
        s.runs[purpose] = DONE
        if s.lost:
            return self.seen_again(host)
        return self._checks()

    def calibrated(self, host: str, columns: Mapping[str, Any]) -> Decision:
        """The verdict of a check (`analysis.baselines.calibrate`'s columns). Not passed,
        or not judged although both runs are over: the host measures its own baseline."""
        self._asked.discard(host)
        s = self.hosts[host]
        reference = s.role.baseline_target
        s.verdict = dict(columns)
        s.note = None
        decision = Decision(rows=[host], said=[calibration_sentence(host, reference, columns)])
        if columns.get("passed") is True:
            return decision
        s.role = HostRole(OWN, host)
        if s.lost:
            s.note = f"{columns.get('note')}; lost before it measured its own baseline"
            decision.rerun_from.append(host)
        elif s.runs.get(FULL) not in (PENDING, DONE):
            s.runs[FULL] = PENDING
            decision.submit.append(PinnedRun(host, FULL))
        return decision

    def lost(self, host: str, purpose: str) -> Decision:
        """A pinned run of `host` was lost with the host (crashed, refused by its pre-flight,
        or cancelled because its worker went away)."""
        s = self.hosts[host]
        s.runs[purpose] = LOST
        s.lost = True
        self._asked.discard(host)
        decision = Decision(rows=[host], rerun_from=[host])
        if s.role.role == REFERENCE:
            s.role = HostRole(OWN, host)
            s.note = "lost before its reference baseline was complete"
            decision.said.append(f"{host}: {s.note}; the variants it finished run again")
            decision.extend(self._promote(s.kind, host))
        elif s.role.role == OWN:
            s.note = "lost before its own baseline was complete"
            decision.said.append(f"{host}: {s.note}; the variants it finished run again")
        else:
            s.note = "lost before its calibration"
            decision.said.append(f"{host}: {s.note}; the variants it finished run again")
        return decision

    def seen_again(self, host: str) -> Decision:
        """A lost host finished a run after all (its worker is back): plan it again."""
        s = self.hosts[host]
        if not s.lost:
            return Decision()
        decision = Decision(said=[f"{host} is back (it finished a run): planned again"])
        return decision.extend(self._plan([host]))

    # --- the moves ---------------------------------------------------------------------------
    def _plan(self, hosts: list[str]) -> Decision:
        """Roles for `hosts` given the live references (their kinds keep them), and the
        pinned runs each role needs."""
        refs = list(self.references().values())
        kinds = {h: self.hosts[h].kind for h in [*refs, *hosts]}
        roles = initial_plan(self.mode, [*refs, *hosts], kinds)
        decision = Decision()
        for host in hosts:
            s = self.hosts[host]
            s.role, s.lost, s.verdict, s.note = roles[host], False, {}, None
            s.runs = {p: state for p, state in s.runs.items() if state == DONE}
            kind = s.kind or "unknown GPU kind"
            decision.rows.append(host)
            if s.role.role == CALIBRATED:
                if s.runs.get(CALIBRATION) != DONE:
                    s.runs[CALIBRATION] = PENDING
                    decision.submit.append(PinnedRun(host, CALIBRATION))
                decision.said.append(
                    f"{host} ({kind}): checked against {s.role.baseline_target} at the "
                    "calibration level before its variants count"
                )
                continue
            if s.runs.get(FULL) != DONE:
                s.runs[FULL] = PENDING
                decision.submit.append(PinnedRun(host, FULL))
            if s.role.role == REFERENCE:
                decision.said.append(f"{host} ({kind}): the reference of its GPU kind: "
                                     "measures the full baseline")  # fmt: skip
            else:
                why = "its GPU kind is unknown" if s.kind is None else "fleet.baseline every_host"
                decision.said.append(f"{host} ({kind}): measures its own full baseline ({why})")
        return decision.extend(self._checks())

    def _checks(self) -> Decision:
        """Calibrations whose two sides are now measured and not yet judged."""
        decision = Decision()
        for host in self._by_position():
            s = self.hosts[host]
            reference = s.role.baseline_target
            if (
                s.role.role == CALIBRATED
                and host not in self._asked
                and s.verdict.get("passed") is None
                and s.runs.get(CALIBRATION) == DONE
                and self.hosts[reference].runs.get(FULL) == DONE
            ):
                self._asked.add(host)
                decision.check.append(Check(host, reference))
        return decision

    def _promote(self, kind: str | None, old: str) -> Decision:
        """The next live host of `kind` becomes its reference; the kind's calibrated hosts
        are checked again, against it."""
        decision = Decision()
        if kind is None:
            return decision
        live = [
            h
            for h in self._by_position()
            if h != old and not self.hosts[h].lost and self.hosts[h].kind == kind
        ]
        if not live:
            decision.said.append(
                f"no other live host of {kind}: the next one seen measures its reference"
            )
            return decision
        new, rest = live[0], live[1:]
        n = self.hosts[new]
        n.role, n.verdict = HostRole(REFERENCE, new), {}
        n.note = f"the reference of {kind} since {old} was lost"
        self._asked.discard(new)
        decision.rows.append(new)
        if n.runs.get(FULL) in (PENDING, DONE):
            decision.said.append(f"{new} becomes the reference of {kind}: its own full "
                                 "baseline is the kind's")  # fmt: skip
        else:
            n.runs[FULL] = PENDING
            decision.submit.append(PinnedRun(new, FULL))
            decision.said.append(f"{new} becomes the reference of {kind}: measures the full "
                                 "baseline (levels it measured already are kept)")  # fmt: skip
        for host in rest:
            c = self.hosts[host]
            if c.role.role != CALIBRATED:  # its own baseline already: nothing to re-check
                continue
            c.role, c.verdict = HostRole(CALIBRATED, new), {}
            c.note = f"checked again against {new}"
            self._asked.discard(host)
            decision.rows.append(host)
            decision.said.append(f"{host}: checked again, against {new}")
        return decision.extend(self._checks())
