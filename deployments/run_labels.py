"""Name and tag a deployment's flow runs as soon as they exist, not when they start.

Prefect applies a flow's `flow_run_name` only when the engine starts the run: a run
created from the UI form, by `prefect deployment run` or by the scheduler carries a
random slug (`zeta2-enya-p`) until then, and the nightly's upcoming runs never show
which night they measure. The server has no hook for naming at creation (the
scheduler inserts runs in bulk without emitting events, so an automation never sees
them), so whatever serves the deployments does it: `specsweep worker` and `specsweep
serve` call `label_pending_runs` every couple of seconds and before each poll for
work. It renames every not-yet-started run (Scheduled, Late, Pending, any scheduled
time) of a catalogue deployment with the very function the flow names itself with at
start, and adds `target:<name>` (and `run:<run_id>` when the run names one) to the
tags the server copied from the deployment. Idempotent: a run already labelled costs
nothing but the read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from prefect import Flow
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterName,
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterDeploymentId,
    FlowRunFilterState,
    FlowRunFilterStateType,
    WorkPoolFilter,
    WorkPoolFilterName,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.client.schemas.responses import DeploymentResponse
from prefect.client.schemas.sorting import FlowRunSort

from specsweep.flows.matrix_sweep import run_tags
from specsweep.flows.nightly_regression import schedule_timezone

# (parameters, scheduled start time, the schedule's timezone) -> the run's name
RunNamer = Callable[[Mapping[str, Any], datetime | None, str | None], str]


class DeploymentEntry(Protocol):
    """What labelling needs of a catalogue entry (deployments/catalogue.py)."""

    @property
    def name(self) -> str: ...
    @property
    def flow(self) -> Flow: ...
    @property
    def run_name(self) -> RunNamer: ...


NOT_STARTED = [StateType.SCHEDULED, StateType.PENDING]  # Late and AwaitingRetry are Scheduled
BATCH = 200  # runs looked at per pass, the soonest first


@dataclass(frozen=True)
class Labelled:
    """One run this pass renamed or tagged."""

    flow_run_id: UUID
    old_name: str
    name: str
    tags: tuple[str, ...]


def catalogue_deployments(
    client: SyncPrefectClient, catalogue: Sequence[DeploymentEntry], pool: str | None
) -> dict[UUID, tuple[DeploymentEntry, DeploymentResponse]]:
    """The catalogue's deployments on the server (in `pool`, when given), by id."""
    names = [e.name for e in catalogue]
    flows = client.read_flows(flow_filter=FlowFilter(name=FlowFilterName(any_=names)))
    flow_names = {f.id: f.name for f in flows}
    found = client.read_deployments(
        flow_filter=FlowFilter(name=FlowFilterName(any_=names)),
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=names)),
        work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])) if pool else None,
    )
    entries = {(e.flow.name, e.name): e for e in catalogue}
    return {
        d.id: (entries[key], d)
        for d in found
        if (key := (flow_names.get(d.flow_id, ""), d.name)) in entries
    }


def wanted_label(
    entry: DeploymentEntry, deployment: DeploymentResponse, run: FlowRun
) -> tuple[str, list[str]]:
    """The name and tags `run` should carry: what its flow will call itself at start."""
    scheduled: datetime | None = run.expected_start_time
    timezone = schedule_timezone(deployment.schedules, run.created_by)
    name = entry.run_name(run.parameters, scheduled, timezone)
    return name, sorted({*run.tags, *run_tags(run.parameters)})


def label_pending_runs(
    client: SyncPrefectClient, catalogue: Sequence[DeploymentEntry], pool: str | None = None
) -> list[Labelled]:
    """Name and tag every not-yet-started run of the catalogue's deployments."""
    deployments = catalogue_deployments(client, catalogue, pool)
    if not deployments:
        return []
    runs = client.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            deployment_id=FlowRunFilterDeploymentId(any_=list(deployments)),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=NOT_STARTED)),
        ),
        sort=FlowRunSort.EXPECTED_START_TIME_ASC,
        limit=BATCH,
    )
    done = []
    for run in runs:
        if run.deployment_id not in deployments:
            continue
        name, tags = wanted_label(*deployments[run.deployment_id], run)
        if name == run.name and tags == sorted(run.tags):
            continue
        client.update_flow_run(run.id, name=name, tags=tags)
        done.append(Labelled(run.id, run.name, name, tuple(tags)))
    return done


def say(labelled: Sequence[Labelled]) -> None:
    """One line per labelled run, printed like a worker's own lines."""
    for item in labelled:
        stamp = f"{datetime.now():%H:%M:%S.%f}"[:-3]
        print(f"{stamp} | INFO    | flow run {item.old_name!r} named {item.name!r}", flush=True)


class Labeller:
    """`label_pending_runs` on a schedule; an API error is printed once and retried."""

    def __init__(
        self, catalogue: Sequence[DeploymentEntry], pool: str | None, every_s: float = 2.0
    ) -> None:
        self.catalogue = catalogue
        self.pool = pool
        self.every_s = every_s
        self._last_error = ""
        self._one_pass = threading.Lock()  # the loop and a poll may ask at the same moment

    def once(self) -> list[Labelled]:
        try:
            with self._one_pass, get_client(sync_client=True) as client:
                labelled = label_pending_runs(client, self.catalogue, self.pool)
        except Exception as exc:  # the worker must outlive an API hiccup; said once
            if repr(exc) != self._last_error:
                self._last_error = repr(exc)
                print(f"run labels: {exc!r}; trying again every {self.every_s:g} s", flush=True)
            return []
        self._last_error = ""
        say(labelled)
        return labelled

    def run_until(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.once()
            stop.wait(self.every_s)
