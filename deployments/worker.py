"""`specsweep worker`: Prefect's process worker, plus the names and tags of the runs it
will run, given as soon as they are created.

The worker polls its pool and starts flow runs exactly as `prefect worker start --pool P`
does (same ProcessWorker, same job variables). Beside it, a Labeller names and tags the
pool's not-yet-started runs of the catalogue's deployments every `label_every_s`
(deployments/run_labels.py), and once more right before each poll for work, so a run is
never started under its random slug.
"""

from __future__ import annotations

import os
import signal

import anyio
from prefect.client.schemas.objects import FlowRun
from prefect.settings import PREFECT_WORKER_HEARTBEAT_SECONDS
from prefect.utilities.processutils import setup_signal_handlers_worker
from prefect.workers.process import ProcessWorker

from specsweep.deployments.catalogue import CATALOGUE
from specsweep.deployments.run_labels import Labeller

LABEL_EVERY_S = 2.0


async def _run(worker: ProcessWorker, labeller: Labeller) -> None:
    poll = worker.get_and_submit_flow_runs

    async def labelled_poll() -> list[FlowRun]:
        await anyio.to_thread.run_sync(labeller.once)
        return await poll()

    async def label_loop() -> None:
        while True:
            await anyio.to_thread.run_sync(labeller.once)
            await anyio.sleep(labeller.every_s)

    # An instance attribute, not a subclass: a ProcessWorker subclass would take over
    # Prefect's registration of the "process" worker type.
    worker.get_and_submit_flow_runs = labelled_poll  # type: ignore[method-assign]
    async with anyio.create_task_group() as group:
        group.start_soon(label_loop)
        await worker.start(printer=print)
        group.cancel_scope.cancel()


def run_worker(
    pool: str,
    name: str | None = None,
    limit: int | None = None,
    label_every_s: float = LABEL_EVERY_S,
) -> None:
    """Run the pool's worker in this process until interrupted (SIGINT/SIGTERM)."""
    worker = ProcessWorker(
        work_pool_name=pool,
        name=name,
        limit=limit,
        heartbeat_interval_seconds=int(PREFECT_WORKER_HEARTBEAT_SECONDS.value()),
    )
    setup_signal_handlers_worker(os.getpid(), f"the {pool} worker", print)
    try:
        anyio.run(_run, worker, Labeller(CATALOGUE, pool, label_every_s))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
