"""The steps of benchmarking one variant, as plain functions.

Each takes a spec and returns a result; ``tasks/`` wraps them for Prefect
(retries, logging, artifacts) and the tests call them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from specsweep import progress, secrets
from specsweep.cleanup import CleanupReport
from specsweep.config import SshTarget, SweepConfig, Target, Variant
from specsweep.errors import ServerDiedError
from specsweep.health import Readiness, ReadyReport
from specsweep.results.rows import RunContext, level_row, request_rows
from specsweep.results.store import ResultsStore
from specsweep.server_facts import ServerFacts
from specsweep.sglang_cmd import LaunchCommand, command_for
from specsweep.targets.host import Host, LocalHost
from specsweep.targets.local import ServerHandle
from specsweep.targets.process import KillReport

log = logging.getLogger(__name__)


def host_for(target: Target) -> Host:
    """The machine a target names; an SSH host keeps one connection per process."""
    if isinstance(target, SshTarget):
        from specsweep.targets import ssh  # fabric loads only for SSH targets

        return ssh.host_for(target)
    return LocalHost.for_target(target)


def kill_stale_servers(config: SweepConfig, *, force: bool = False) -> CleanupReport:
    """Stop leftovers of ours on the server's port and GPUs (CUDA_VISIBLE_DEVICES, else all)."""
    return host_for(config.target).kill_stale(
        config.server.port,
        config.server.env,
        force=force,
        tolerate_foreign_gpu=config.target.tolerate_foreign_gpu,
    )


def launch(config: SweepConfig, variant: Variant, run_id: str) -> ServerHandle:
    host = host_for(config.target)
    cmd = command_for(config, variant)
    log_path = host.log_path(run_id, variant.label)
    with_values = LaunchCommand(cmd.argv, secrets.resolve_env(cmd.env))  # only the server sees them
    handle = host.start(with_values, log_path, config.server.port)
    log.info("launched %s: pid %d, log %s\n  %s", variant.label, handle.pid, log_path, cmd.shell())
    return handle


def wait_ready(
    config: SweepConfig,
    handle: ServerHandle,
    on_progress: Callable[[Readiness, str], None] | None = None,
) -> ReadyReport:
    return host_for(config.target).wait_ready(handle, config.server, on_progress)


def facts(config: SweepConfig) -> ServerFacts:
    """Asked on the GPU host: its nvidia-smi names the GPUs the server runs on."""
    return host_for(config.target).facts(config.server)


def measure_level(
    config: SweepConfig,
    ctx: RunContext,
    variant: Variant,
    facts: ServerFacts,
    concurrency: int,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run one level and write it at once, so a later crash loses nothing measured.

    The per-request file is written first: a level file is the mark of a level
    done, and resume skips exactly those.
    """
    report = progress.reporter(variant.label, concurrency)

    def both(done: int, total: int) -> None:
        report(done, total)
        if on_progress is not None:
            on_progress(done, total)

    both(0, config.load.num_requests(concurrency))  # the bar appears when the level starts
    host = host_for(config.target)
    result = host.run_level(config.server, concurrency, config.load, both)
    store = ResultsStore(config.results_dir)
    store.write_requests(
        ctx.run_id, variant.label, concurrency, ctx.target,
        request_rows(ctx, variant.label, concurrency, result),
    )  # fmt: skip
    cmd = command_for(config, variant)  # what ran, on the target
    row = level_row(ctx, config.server, variant, config.load, facts, result, cmd)
    store.write_level(row)
    return row


def ensure_alive(config: SweepConfig, handle: ServerHandle, after: str) -> None:
    """After a failed level: a dead server ends the variant with its log, not more levels."""
    host = host_for(config.target)
    if not host.is_alive(handle):
        raise ServerDiedError(f"server process died during {after} ", host.tail(handle, 30))


def teardown(config: SweepConfig, handle: ServerHandle) -> KillReport:
    return host_for(config.target).stop(handle)
