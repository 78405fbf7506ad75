"""One Prefect global concurrency slot per target host, held for a server's whole life.

Two flows that launch servers on the same GPUs would kill each other's servers
(kill-stale) or share the GPUs and measure nonsense. Each target gets a
pre-created, strict global concurrency limit of 1 named `specsweep-target-<name>`;
`benchmark_variant` holds it from kill-stale through teardown, so a second flow
for the same target waits (and says so in its log) until the first has torn
its server down.

While the slot is held, a simulator target's GPU checks (kill-stale, server facts,
teardown) ask the simulator's nvidia-smi stand-in with the server's environment, not
a real nvidia-smi: the simulated servers hold only simulated GPU memory.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency._asyncio import ConcurrencySlotAcquisitionError
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL

from specsweep.config import SweepConfig
from specsweep.errors import SpecsweepError, TargetLockMissing
from specsweep.flows import lock_holder
from specsweep.targets.gpus import simulated_gpus

LOCK_PREFIX = "specsweep-target-"
TARGET_SLOTS = 1  # one server per GPU host at a time
# A cancelled or crashed run cannot release its slot; its lease then expires after
# this long (the cancellation hook has killed the server by then).
LEASE_SECONDS = 60.0


def target_lock_name(config: SweepConfig) -> str:
    """`specsweep-target-<target name>`, reduced to characters any Prefect name accepts."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", config.target.name.lower()).strip("-")
    return LOCK_PREFIX + (slug or "unnamed")


def ensure_target_limit(name: str) -> bool:
    """Create the limit (1 slot) unless it exists; True when it was created."""
    with get_client(sync_client=True) as client:
        try:
            existing = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=name, limit=TARGET_SLOTS)
            )
            return True
    if existing.limit != TARGET_SLOTS:
        raise SpecsweepError(
            f"global concurrency limit {name} exists with limit {existing.limit}; a target "
            f"runs one server at a time: `prefect gcl update {name} --limit 1`"
        )
    return False


def _missing(name: str) -> TargetLockMissing:
    return TargetLockMissing(
        f"global concurrency limit {name!r} does not exist on the Prefect API at "
        f"{PREFECT_API_URL.value() or '(ephemeral)'}; it keeps two flows off the same GPUs. "
        f"Create it once with `specsweep limits create -c <config.yaml>` (or "
        f"`prefect gcl create {name} --limit 1`), then start the run again"
    )


@contextmanager
def target_lock(config: SweepConfig, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the target's slot; log clearly when another flow holds it and we wait."""
    logger = get_run_logger()
    name = target_lock_name(config)
    with get_client(sync_client=True) as client:
        try:
            limit = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            raise _missing(name) from None
        if limit.active_slots >= limit.limit and (
            reason := lock_holder.free_if_holder_gone(client, name)
        ):
            logger.warning("freed %s: %s (its server is stopped by kill-stale)", name, reason)
            limit = client.read_global_concurrency_limit_by_name(name)
    if limit.active_slots >= limit.limit:
        logger.warning(
            "target %s is busy: another flow run holds %s (a server on these GPUs); "
            "waiting for it to tear its server down",
            config.target.name,
            name,
        )
    started = time.monotonic()
    with ExitStack() as stack:
        try:
            stack.enter_context(
                concurrency(
                    name,
                    occupy=1,
                    strict=True,
                    timeout_seconds=timeout_s,
                    lease_duration=LEASE_SECONDS,
                )
            )
        except ConcurrencySlotAcquisitionError as exc:  # the limit vanished since the check
            raise _missing(name) from exc
        logger.info("holding %s (waited %.1f s)", name, time.monotonic() - started)
        lock_holder.record(name)
        stack.callback(lock_holder.clear, name)  # runs before the slot is released
        if config.server.backend == "simulator" and config.target.kind == "local":
            # an SSH host runs its checks there, with its own PATH
            gpus = stack.enter_context(simulated_gpus(config.server.env))
            if gpus.nvidia_smi is None:
                logger.info("%s", gpus.why)
        yield
