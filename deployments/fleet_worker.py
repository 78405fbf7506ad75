"""A fleet host's worker: Prefect's process worker that polls the pool's shared queue and
its host's own, and stops asking for work while its host fails its pre-flight check.

Pinning: a run submitted to the host's queue (`specsweep.fleet.hosts.host_queue`, a
baseline or calibration the sweep needs measured on this host) goes to this worker and no
other, since no other worker polls that queue (Prefect's `get_scheduled_flow_runs` returns
only runs of the queues a worker names). The host queue ranks ahead of the default one, so
a pinned run is taken before the shared variants queued before it.

A host that breaks while its worker runs (SSH gone, results mount lost) would otherwise
take every variant that comes along and fail each one. Here a variant run that finds its
host unavailable leaves a marker file (path in SPECSWEEP_FLEET_MARKER); before each poll
the worker looks at it: while the marker is there, the worker takes no work and re-runs
the host's pre-flight every `recheck_s`; when the check passes it removes the marker and
polls again. Placement stays Prefect's: a worker that does not poll gets no runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import PREFECT_WORKER_HEARTBEAT_SECONDS
from prefect.utilities.processutils import setup_signal_handlers_worker
from prefect.variables import Variable
from prefect.workers.process import ProcessWorker

from specsweep.config.fleet import HOST_ENV, MARKER_ENV, Fleet, FleetHost, worker_name
from specsweep.errors import SpecsweepError
from specsweep.fleet.hosts import facts_value, facts_variable, host_queue

if TYPE_CHECKING:
    from specsweep.targets.server_facts import ServerFacts


def _say(message: str, *args: object) -> None:
    """Printed like the worker's own lines (a `specsweep` logger would try to ship them
    to the API, which only takes logs from inside a flow run)."""
    print(f"{datetime.now():%H:%M:%S.%f}"[:-3] + " | WARNING | " + message % args, flush=True)


class HostGate:
    """Open while the host has no unavailability marker, or once its re-check passes."""

    def __init__(
        self, host: str, marker: Path, check: Callable[[], None] | None, recheck_s: float
    ) -> None:
        self.host = host
        self.marker = marker
        self.check = check
        self.recheck_s = recheck_s
        self._last_check: float | None = None  # monotonic time; None: never checked
        self._said_closed = False

    def is_open(self) -> bool:
        if not self.marker.exists():
            return True
        now = time.monotonic()  # counts from boot: a fresh host's clock is small
        if self._last_check is not None and now - self._last_check < self.recheck_s:
            return False
        self._last_check = now
        reason = self.marker.read_text().strip() or "unavailable"
        if self.check is None:  # no config to check with: let the next run find out
            _say("host %s: re-opening after %.0f s (%s)", self.host, self.recheck_s, reason)
            self.marker.unlink(missing_ok=True)
            return True
        try:
            self.check()
        except SpecsweepError as exc:
            self.marker.write_text(str(exc))
            if not self._said_closed:
                _say(
                    "host %s takes no work: %s (checking again every %.0f s)",
                    self.host, exc, self.recheck_s,
                )  # fmt: skip
                self._said_closed = True
            return False
        _say("host %s passes its pre-flight check again: taking work", self.host)
        self.marker.unlink(missing_ok=True)
        self._said_closed = False
        return True


def ensure_host_queue(pool: str, host: str) -> list[str]:
    """The queues `host`'s worker polls: the pool's default (shared) queue and the host's
    own, created ahead of the default one (priority 1; Prefect moves the others down)."""
    name = host_queue(host)
    with get_client(sync_client=True) as client:
        try:
            work_pool = client.read_work_pool(pool)
        except ObjectNotFound:  # a worker started before `fleet deploy` (or beside it)
            with contextlib.suppress(ObjectAlreadyExists):
                client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
            work_pool = client.read_work_pool(pool)
        try:
            client.read_work_queue_by_name(name, work_pool_name=pool)
        except ObjectNotFound:
            # (its worker and `fleet deploy` may create it at the same moment)
            with contextlib.suppress(ObjectAlreadyExists):
                client.create_work_queue(
                    name=name,
                    work_pool_name=pool,
                    priority=1,
                    description=f"Runs only fleet host {host} takes (its baselines).",
                )
        assert work_pool.default_queue_id is not None
        shared = client.read_work_queue(work_pool.default_queue_id).name
    return [shared, name]


def publish_facts(pool: str, host: str, facts: ServerFacts | None) -> None:
    """What the host's pre-flight check saw, for the sweep's baseline plan; None (started
    without the check) removes what an earlier start published: it may be stale."""
    name = facts_variable(pool, host)
    if facts is None:
        Variable.unset(name)
        return
    Variable.set(name, facts_value(facts, host), tags=["specsweep", "fleet-facts"], overwrite=True)


def marker_path(fleet: Fleet, host: FleetHost, state_dir: Path) -> Path:
    return (state_dir / f"{fleet.name}-{host.name}.unavailable").resolve()


async def _run(worker: ProcessWorker, gate: HostGate) -> None:
    poll = worker.get_and_submit_flow_runs

    async def gated_poll() -> list:
        if not await anyio.to_thread.run_sync(gate.is_open):
            return []
        return await poll()

    worker.get_and_submit_flow_runs = gated_poll  # type: ignore[method-assign]
    await worker.start(printer=print)


def run_host_worker(
    fleet: Fleet,
    host: FleetHost,
    check: Callable[[], None] | None,
    recheck_s: float = 60.0,
    state_dir: Path = Path(".specsweep/fleet"),
) -> None:
    """Run the host's worker in this process until interrupted (SIGINT/SIGTERM)."""
    queues = ensure_host_queue(fleet.pool, host.name)
    marker = marker_path(fleet, host, state_dir)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)  # the start-up pre-flight just passed
    # The process worker gives its flow runs this process's environment.
    os.environ[HOST_ENV] = host.name
    os.environ[MARKER_ENV] = str(marker)
    os.environ["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] = str(fleet.heartbeat_s)
    worker = ProcessWorker(
        work_pool_name=fleet.pool,
        name=worker_name(fleet.name, host.name),
        work_queues=queues,  # the shared queue and this host's own (pinned baselines)
        limit=1,  # one flow run, so one server, at a time on this host
        heartbeat_interval_seconds=int(PREFECT_WORKER_HEARTBEAT_SECONDS.value()),
    )
    setup_signal_handlers_worker(os.getpid(), f"the {host.name} worker", print)
    try:
        anyio.run(_run, worker, HostGate(host.name, marker, check, recheck_s))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
