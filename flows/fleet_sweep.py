"""One sweep spread over a fleet of GPU hosts, placed by Prefect.

`fleet_sweep` submits every variant as its own `fleet-variant` flow run into the
fleet's work pool (`run_deployment`, all at once; with `search: adaptive`, one per host
at a time, as the search chooses, each time a host frees up). Each host runs a worker with
a limit of one flow run, so Prefect hands the next variant to whichever host is
free; the host's global concurrency limit is held for its server's whole life,
so no two servers ever share a host's GPUs. specsweep schedules nothing itself:
it only re-submits a variant whose host was lost (its run Crashed: the zombie
automation fires when heartbeats stop) or failed its pre-flight check, and the
re-submitted run goes to whichever worker polls next (a dead host polls no more).

Baselines (`fleet.baseline`, docs/fleet.md): a speedup is only computed within a host, or
between hosts of one GPU kind whose calibration agreed. With per_gpu_kind or every_host
the baseline is not a shared variant: its runs are pinned to hosts (each host's worker also
polls a work queue of its own, `specsweep.fleet.hosts.host_queue`): a full baseline on
each kind's reference (and on every host that measures its own), a calibration level on
the others; `specsweep.fleet.plan.BaselinePlan` decides, this flow carries it out and
writes the hosts table the answer reads. `once`: the baseline is one variant among the
others, measured on any host.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from logging import Logger, LoggerAdapter
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.objects import FlowRun, WorkerStatus
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelled, Cancelling

from specsweep.analysis.baselines import calibrate
from specsweep.config import SweepConfig, Variant
from specsweep.config.fleet import Fleet, calibration_level, worker_name
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError
from specsweep.fleet.hosts import facts_from_value, facts_variable, host_queue
from specsweep.fleet.plan import CALIBRATION, BaselinePlan, Decision, PinnedRun
from specsweep.flows.fleet_variant import FLEET_VARIANT, HOST_TAG, KIND
from specsweep.flows.run_records import begin_run, finish_run
from specsweep.results.store import ResultsStore
from specsweep.tasks.search import plan_next_launch


def _host_of(run: FlowRun) -> str | None:
    """The host a run went to: its name says once it started (a pinned run's from the
    start)."""
    return run.name.rpartition("@")[2] if "@" in run.name else None


def _where(run: FlowRun) -> str:
    return _host_of(run) or "an unknown host"


def _lost_host(run: FlowRun) -> bool:
    """Crashed (no heartbeat, killed) or refused by its host: worth another host."""
    state = run.state
    if state is None:
        return False
    return state.is_crashed() or (state.is_failed() and "HostUnavailable" in (state.message or ""))


def _check_deployment() -> None:
    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(FLEET_VARIANT)
        except ObjectNotFound:
            raise ConfigError(
                f"deployment {FLEET_VARIANT} not found on the Prefect API at "
                f"{PREFECT_API_URL.value() or '(ephemeral: a fleet needs a Prefect server)'}: "
                "run `specsweep fleet deploy -c <sweep.yaml> --fleet <fleet.yaml>` once"
            ) from None


def _hosts_online(fleet: Fleet) -> list[str]:
    """The fleet's hosts with a worker online in its pool (workers are named by host)."""
    with get_client(sync_client=True) as client:
        try:
            workers = client.read_workers_for_work_pool(fleet.pool)
        except ObjectNotFound:
            return []
    online = {w.name for w in workers if w.status == WorkerStatus.ONLINE}
    return [h.name for h in fleet.hosts if worker_name(fleet.name, h.name) in online]


def _host_facts(fleet: Fleet, hosts: list[str]) -> dict[str, dict[str, Any] | None]:
    """What each host's worker published at its pre-flight check (None: nothing, an
    unknown GPU kind)."""
    with get_client(sync_client=True) as client:
        found = {h: client.read_variable_by_name(facts_variable(fleet.pool, h)) for h in hosts}
    return {h: facts_from_value(v.value) if v is not None else None for h, v in found.items()}


def _cancel(client: SyncPrefectClient, run_id: UUID, scheduled: bool) -> None:
    # Not started: cancelled outright. Started: Cancelling, so its worker stops the
    # process and the run's own hook stops its server.
    client.set_flow_run_state(run_id, Cancelled() if scheduled else Cancelling(), force=True)


def _cancel_children(flow: Any, flow_run: FlowRun, state: Any) -> None:
    """Cancelling a fleet sweep cancels the variant runs it submitted."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run.id])
            )
        )
        for child in children:
            if child.state is None or child.state.is_final():
                continue
            _cancel(client, child.id, child.state.is_scheduled())


def _run_name() -> str:
    fleet = flow_run.parameters.get("fleet")
    fleet = fleet if isinstance(fleet, Fleet) else Fleet.model_validate(fleet)
    return f"fleet-sweep/{fleet.name}/{len(fleet.hosts)}-hosts"


@dataclass(frozen=True)
class _Job:
    """A submitted fleet-variant run: a shared one (any host) or a pinned baseline."""

    label: str
    pin: PinnedRun | None = None


class _FleetRun:
    """The sweep's state between polls: what is in flight, where, and the baseline plan."""

    def __init__(
        self,
        config: SweepConfig,
        fleet: Fleet,
        variants: list[Variant],
        run_id: str,
        force: bool,
        logger: Logger | LoggerAdapter[Logger],
    ) -> None:
        self.config, self.fleet, self.variants = config, fleet, variants
        self.run_id, self.force, self.logger = run_id, force, logger
        self.by_label = {v.label: v for v in variants}
        self.base = next((v for v in variants if v.is_baseline), None)
        self.plan: BaselinePlan | None = None
        self.level, self.shape = 0, config.load.shape_list()[0].label  # the calibration cell
        if fleet.baseline != "once" and self.base is not None:
            self.plan = BaselinePlan(fleet.baseline, [h.name for h in fleet.hosts])
            self.level = calibration_level(fleet, config)
        self.store = ResultsStore(config.results_dir)
        self.attempts: dict[str, int] = {}
        self.pending: dict[UUID, _Job] = {}
        self.placed: dict[UUID, str] = {}  # a started shared run's host
        self.errors: dict[str, str] = {}
        self.finished_on: dict[str, list[str]] = defaultdict(list)  # host -> shared labels
        self.online: list[str] = []
        self.tried: set[str] = set()
        self.search_stop: str | None = None
        self.search_done = False
        self.changed = True  # something ended or was planned since the search last asked

    # --- submitting ----------------------------------------------------------------------
    def _parameters(self, variant: Variant, levels: list[int] | None = None) -> dict[str, Any]:
        parameters = {
            "config": self.config,
            "fleet": self.fleet,
            "variant": variant,
            "run_id": self.run_id,
            "force": self.force,
        }
        return parameters | ({"levels": levels} if levels is not None else {})

    def submit(self, label: str) -> None:
        """A variant into the pool's shared queue: whichever host is free takes it."""
        self.attempts[label] = self.attempts.get(label, 0) + 1
        run = run_deployment(
            FLEET_VARIANT,
            parameters=self._parameters(self.by_label[label]),
            timeout=0,  # submitted, not awaited: the workers place it
            as_subflow=True,
            tags=["specsweep", HOST_TAG, f"run:{self.run_id}"],
        )
        self.pending[run.id] = _Job(label)

    def pin(self, pinned: PinnedRun) -> None:
        """A baseline run into the host's own queue: only that host's worker polls it."""
        assert self.base is not None and self.plan is not None
        calibration = pinned.purpose == CALIBRATION
        role = "calibration" if calibration else self.plan.role(pinned.host).role
        run = run_deployment(
            FLEET_VARIANT,
            parameters=self._parameters(self.base, [self.level] if calibration else None),
            timeout=0,
            as_subflow=True,
            work_queue_name=host_queue(pinned.host),
            flow_run_name=f"fleet-variant/{self.base.label}@{pinned.host}",
            tags=["specsweep", HOST_TAG, f"run:{self.run_id}", f"baseline:{role}"],
        )
        self.pending[run.id] = _Job(self.base.label, pinned)

    # --- the baseline plan ---------------------------------------------------------------
    def apply(self, decision: Decision) -> None:
        """Carry out a plan decision: say it, pin its runs, judge its calibrations, measure
        again what a lost baseline leaves uncomparable, write the hosts-table rows."""
        assert self.plan is not None
        for line in decision.said:
            self.logger.info("baselines: %s", line)
        for pinned in decision.submit:
            self.pin(pinned)
        if decision.check:
            levels = self.store.read_levels(self.run_id)
            for check in decision.check:
                columns = calibrate(
                    levels, check.host, check.reference, self.level, self.shape,
                    self.fleet.calibration.tolerance,
                )  # fmt: skip
                self.apply(self.plan.calibrated(check.host, columns))
        for host in decision.rerun_from:
            for label in self.finished_on.pop(host, []):
                self.logger.warning(
                    "%s: measured on %s, whose baseline is lost; measuring it again on "
                    "another host", label, host,
                )  # fmt: skip
                self.submit(label)
        for host in decision.rows:
            self.store.write_host_plan(self.plan.row(self.run_id, host))

    def refresh_hosts(self) -> None:
        """Which hosts are online; a planned sweep plans each host when first seen."""
        self.online = _hosts_online(self.fleet)
        if self.plan is None:
            return
        if new := [h for h in self.online if h not in self.plan.hosts]:
            self.changed = True
            self.apply(self.plan.add(new, _host_facts(self.fleet, new)))

    def host_lost(self, client: SyncPrefectClient, host: str) -> None:
        """A host lost a run: its pinned runs still queued cannot move, and its worker is
        gone or takes no work; they are cancelled and the plan goes on without them."""
        if self.plan is None or host not in self.plan.hosts:
            return
        for run_id, job in list(self.pending.items()):
            if job.pin is not None and job.pin.host == host:
                del self.pending[run_id]
                _cancel(client, run_id, scheduled=True)
                self.apply(self.plan.lost(host, job.pin.purpose))

    # --- runs that end -------------------------------------------------------------------
    def ended(self, client: SyncPrefectClient, run: FlowRun, job: _Job) -> None:
        assert run.state is not None
        label, host = job.label, _where(run)
        message = (run.state.message or run.state.name).strip().splitlines()
        why = message[0] if message else run.state.name
        lost = _lost_host(run) or run.state.is_cancelled()
        if job.pin is not None:
            assert self.plan is not None
            if lost:
                self.logger.warning(
                    "%s's %s baseline lost (%s: %s): a pinned run cannot move to another host",
                    job.pin.host, job.pin.purpose, run.state.name, why,
                )  # fmt: skip
                self.host_lost(client, job.pin.host)
                self.apply(self.plan.lost(job.pin.host, job.pin.purpose))
                return
            if run.state.is_completed():
                self.logger.info("%s (%s) done on %s", label, job.pin.purpose, host)
            else:  # a failed baseline: what it measured is stored, and it is an error
                self.errors[label] = f"{run.state.name} on {host}: {why}"
                self.logger.error("variant %s failed: %s", label, self.errors[label])
            self.apply(self.plan.finished(job.pin.host, job.pin.purpose))
            return
        if run.state.is_completed():
            self.logger.info("%s done on %s", label, host)
            if (on := _host_of(run)) is not None:
                self.finished_on[on].append(label)
                if self.plan is not None and on in self.plan.hosts:
                    self.apply(self.plan.seen_again(on))
        elif _lost_host(run) and self.attempts[label] < self.fleet.max_attempts:
            self.logger.warning(
                "%s lost with host %s (%s: %s); re-running it on another host "
                "(attempt %d of %d)", label, host, run.state.name, why,
                self.attempts[label] + 1, self.fleet.max_attempts,
            )  # fmt: skip
            self.submit(label)
        else:
            self.errors[label] = f"{run.state.name} on {host}: {why}"
            self.logger.error("variant %s failed: %s", label, self.errors[label])
        if _lost_host(run) and (on := _host_of(run)) is not None:
            self.host_lost(client, on)

    def poll(self, client: SyncPrefectClient) -> None:
        """One look at every run in flight (one API call), and at the hosts online."""
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(self.pending)))
        )
        if self.plan is not None:
            self.refresh_hosts()
        for run in runs:
            job = self.pending.get(run.id)
            if job is None or run.state is None:  # (cancelled with its host meanwhile)
                continue
            if run.state.is_final():
                del self.pending[run.id]
                self.placed.pop(run.id, None)
                self.changed = True
                self.ended(client, run, job)
            elif (host := _host_of(run)) is not None and job.pin is None:
                self.changed |= self.placed.get(run.id) != host  # it may share a busy host
                self.placed[run.id] = host
            elif (
                job.pin is not None and run.state.is_scheduled() and job.pin.host not in self.online
            ):  # its worker went away before taking it
                self.logger.warning("%s has no worker online any more", job.pin.host)
                self.host_lost(client, job.pin.host)

    # --- search: adaptive ----------------------------------------------------------------
    def busy_hosts(self) -> int:
        """Hosts with a run in flight: a pinned run's host, a started run's, and one per
        shared run not placed yet."""
        hosts: set[str] = set()
        unplaced = 0
        for run_id, job in self.pending.items():
            host = job.pin.host if job.pin is not None else self.placed.get(run_id)
            if host is None:
                unplaced += 1
            else:
                hosts.add(host)
        return len(hosts) + unplaced

    def waiting_for_hosts(self) -> bool:
        """A planned sweep with no host planned yet waits for a worker to come online."""
        return self.plan is not None and not self.plan.hosts

    def fill(self) -> None:
        """search: adaptive: hand out what the planner chooses, one per free host, as hosts
        free up (the planner sees the variants in flight and waits for them before it
        stops). With a baseline plan the baseline is the pinned runs', never the search's:
        it counts as tried, and as in flight while a pinned baseline run is. Asked again
        only once something changed: a run ended or started, or a host was planned."""
        if self.search_done or not self.changed:
            return
        self.changed = False
        while self.busy_hosts() < (len(self.online) or len(self.fleet.hosts)):
            tried = set(self.tried)
            in_flight = {j.label for j in self.pending.values() if j.pin is None}
            if self.plan is not None:
                assert self.base is not None
                tried.add(self.base.label)
                if self.plan.in_flight() or not self.plan.hosts:
                    in_flight.add(self.base.label)
            launch, why, done = plan_next_launch(
                self.config, self.variants, self.run_id, self.fleet.name, tried, in_flight
            )
            if launch is None:
                self.search_stop, self.search_done = (why, True) if done else (None, False)
                return
            self.tried.add(launch.label)
            self.submit(launch.label)


@flow(
    name="fleet-sweep",
    flow_run_name=_run_name,
    on_cancellation=[_cancel_children],
    on_crashed=[_cancel_children],
)
def fleet_sweep(
    config: SweepConfig,
    fleet: Fleet,
    run_id: str | None = None,
    force: bool = False,
    publish: bool = True,
) -> dict[str, Any]:
    """Every variant of the config, each on a free host of the fleet, into one store.

    Args:
        config: What to measure (its target is replaced by each host's).
        fleet: Where: the hosts, their work pool, how lost hosts are handled, and where
            baselines are measured (fleet.baseline).
        run_id: Resume this run: levels measured on a host are skipped there.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
        publish: Render the report and publish the answer as artifacts.
    """
    logger = get_run_logger()
    variants = sweep_variants(config)  # every rule checked before any launch
    if config.verify_policy is not None:
        # the export compares curves measured on one host; a fleet spreads them over several
        raise ConfigError(
            "verify_policy is not available on a fleet sweep (the export and its proof must "
            "be measured on one host): run the fleet sweep, then `specsweep policy verify "
            "RUN_ID -c FILE` against one host's target"
        )
    if fleet.baseline != "once":
        calibration_level(fleet, config)  # a bad calibration level: refused before any launch
    _check_deployment()
    ctx, started = begin_run(config, variants, KIND, run_id, fleet.name)
    sweep = _FleetRun(config, fleet, variants, ctx.run_id, force, logger)
    sweep.refresh_hosts()  # plans the hosts online (pinned baselines first)
    online = sweep.online
    if missing := [h.name for h in fleet.hosts if h.name not in online]:
        logger.warning(
            "no worker online for host(s) %s (down, failed their pre-flight check, or not "
            "started: `specsweep fleet worker --host NAME`); their share goes to %s",
            ", ".join(missing), ", ".join(online) or "whichever host starts a worker",
        )  # fmt: skip
    if config.search.adaptive:
        sweep.fill()
    else:
        for label in sweep.by_label:
            if sweep.plan is None or label != (sweep.base.label if sweep.base else None):
                sweep.submit(label)
    logger.info(
        "submitted %d runs to pool %s (hosts online: %s; baselines: %s)",
        len(sweep.pending), fleet.pool, ", ".join(online) or "none yet",
        fleet.baseline if sweep.plan is not None else "once, any host",
    )  # fmt: skip
    with get_client(sync_client=True) as client:
        while sweep.pending or sweep.waiting_for_hosts():
            time.sleep(fleet.poll_s)
            if sweep.pending:
                sweep.poll(client)
            else:
                sweep.refresh_hosts()
            if config.search.adaptive and not (sweep.errors and config.stop_on_failure):
                sweep.fill()
    return finish_run(
        config, ctx, variants, sweep.errors, started, KIND, publish, search_stop=sweep.search_stop
    )
