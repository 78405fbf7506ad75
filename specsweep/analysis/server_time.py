"""What a run's servers cost against what its whole grid would have cost.

Launches are what a user pays for: on the seeds' GPU box one costs 8.5 minutes before a
request is measured, measuring its levels about one more. So an adaptive search states
its launches against the grid's and the server time both ways: what its servers held
(measured, from the phase records, every relaunch included) and what the grid would have
held (estimated from this run: each variant not launched at the run's median overhead
per launch, each level not measured at that level's median time here). The estimate is
labelled as one wherever it is shown; it never enters the answer.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from specsweep.results.phases import held_seconds
from specsweep.results.store import target_slug

OK = "ok"


@dataclass(frozen=True)
class ServerTime:
    """A run's launches and server time beside its grid's."""

    launched: int  # grid variants whose server was started
    grid: int  # variants the run chose among
    holds: int  # servers brought up, relaunches (retries, resumes) included
    relaunches: int  # of holds, a variant's second or later on the same target
    grid_launches: int  # the grid's: each variant on as many targets as one ran on here
    held_s: float  # measured: seconds the run's servers held their GPUs
    launch_s: float  # measured: of held_s, launch to ready
    grid_s: float | None  # estimated: the whole grid's held seconds (None: no basis)

    @property
    def launch_share(self) -> float:
        return self.holds / self.grid_launches if self.grid_launches else float("nan")

    @property
    def time_share(self) -> float | None:
        return self.held_s / self.grid_s if self.grid_s else None


def _key(key: str, known: set[str]) -> tuple[str, str | None]:
    """A run row's phases key ("variant", or "variant@target" where a variant ran on
    several targets) -> (variant, target or None)."""
    if key in known or "@" not in key:
        return key, None
    variant, _, target = key.rpartition("@")
    return variant, target


def _seconds(frame: pd.DataFrame) -> pd.Series:
    started = pd.to_datetime(frame["started_at"], utc=True)
    ended = pd.to_datetime(frame["ended_at"], utc=True)
    return (ended - started).dt.total_seconds()


def server_time(
    phases: Mapping[str, Mapping[str, float]],
    levels: pd.DataFrame,
    grid: Sequence[str],
) -> ServerTime | None:
    """The run's cost (phases: variant or variant@target -> its phase record, as the runs
    row keeps them; levels: every stored level row, every target; grid: the variants the
    run chose among). None without a phase record."""
    if not phases:
        return None
    names = set(grid) | (set(levels["variant"]) if len(levels) else set())
    keyed = [(*_key(k, names), r) for k, r in phases.items()]
    records = [(v, r) for v, _, r in keyed]
    held = [held_seconds(r) for _, r in records]
    launched = {v for v, _ in records}
    measured = pd.DataFrame(columns=["variant", "shape", "concurrency", "status", "seconds"])
    if len(levels) and {"started_at", "ended_at"} <= set(levels.columns):
        measured = levels.assign(
            shape=levels["shape"].fillna("") if "shape" in levels.columns else "",
            seconds=_seconds(levels),
        )
    ok = measured[measured["status"] == OK]
    cells = set(zip(measured["shape"], measured["concurrency"], strict=True))
    per_cell = ok.groupby(["shape", "concurrency"])["seconds"].median().to_dict()
    # a hold's time beyond its levels: kill-stale, launch to ready, calibration, teardown
    overheads = []
    for (variant, target, record), seconds in zip(keyed, held, strict=True):
        if "held_until_unix" not in record:
            continue
        own = ok["variant"] == variant
        if target is not None and "target" in ok.columns:
            own &= ok["target"].map(target_slug) == target_slug(target)
        measuring = float(ok.loc[own, "seconds"].sum())
        overheads.append(max(0.0, seconds - measuring) / max(1.0, record.get("holds", 1.0)))
    grid_s: float | None = None
    if overheads and cells and all(c in per_cell for c in cells):
        missing = [v for v in grid if v not in launched]
        done = set(zip(ok["variant"], ok["shape"], ok["concurrency"], strict=True))
        unmeasured = sum(
            per_cell[s, c] for v in launched for s, c in cells if (v, s, c) not in done
        )
        grid_s = (
            sum(held)
            + len(missing) * (statistics.median(overheads) + sum(per_cell.values()))
            + unmeasured
        )
    holds = int(sum(r.get("holds", 1.0) for _, r in records))
    per_variant = max(sum(1 for v, _ in records if v == name) for name in launched)
    return ServerTime(
        launched=len(launched & set(grid)) if grid else len(launched),
        grid=len(grid) or len(launched),
        holds=holds,
        relaunches=holds - len(records),
        grid_launches=(len(grid) or len(launched)) * per_variant,
        held_s=sum(held),
        launch_s=sum(float(r.get("launch_to_ready_s", 0.0)) for _, r in records),
        grid_s=grid_s,
    )
