"""The steps of benchmarking one variant, as plain functions.

Each takes a spec and returns a result; ``tasks/`` wraps them for Prefect
(retries, logging, artifacts) and the tests call them directly.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsweep import progress
from specsweep.cleanup import CleanupReport, kill_stale
from specsweep.config import LocalTarget, SweepConfig, Variant
from specsweep.errors import ConfigError
from specsweep.gpus import gpus_from_env
from specsweep.health import Readiness, ReadyReport, wait_until_ready
from specsweep.loadgen.runner import run_level_sync
from specsweep.results.rows import RunContext, ServerFacts, level_row, request_rows
from specsweep.results.store import ResultsStore
from specsweep.sglang_cmd import build_launch_command
from specsweep.targets.local import LocalRunner, ServerHandle
from specsweep.targets.process import KillReport

log = logging.getLogger(__name__)


def runner_for(target: LocalTarget) -> LocalRunner:
    return LocalRunner(target.workdir)


def server_log_path(target: LocalTarget, run_id: str, variant: Variant) -> Path:
    return Path(target.workdir) / "logs" / run_id / f"{variant.label}.log"


def kill_stale_servers(config: SweepConfig, *, force: bool = False) -> CleanupReport:
    """Stop leftovers of ours on the server's port and GPUs (CUDA_VISIBLE_DEVICES, else all)."""
    return kill_stale(
        runner_for(config.target),
        config.server.port,
        force=force,
        gpus=gpus_from_env(config.server.env),
    )


def launch(config: SweepConfig, variant: Variant, run_id: str) -> ServerHandle:
    cmd = build_launch_command(config.server, variant)
    if shutil.which(cmd.argv[0]) is None:
        raise ConfigError(
            f"cannot launch the server: {cmd.argv[0]!r} is not an executable on this host "
            "(set server.python to the interpreter that has sglang, or fix server.launch_prefix)"
        )
    log_path = server_log_path(config.target, run_id, variant)
    handle = runner_for(config.target).start(cmd, log_path, config.server.port)
    log.info("launched %s: pid %d, log %s\n  %s", variant.label, handle.pid, log_path, cmd.shell())
    return handle


def wait_ready(
    config: SweepConfig,
    handle: ServerHandle,
    on_progress: Callable[[Readiness, str], None] | None = None,
) -> ReadyReport:
    runner = runner_for(config.target)
    return wait_until_ready(
        config.server.base_url,
        is_alive=lambda: runner.is_alive(handle),
        tail_log=lambda n: runner.tail(handle, n),
        timeout_s=config.server.startup_timeout_s,
        on_progress=on_progress,
    )


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
    result = run_level_sync(config.server.base_url, concurrency, config.load, on_progress=both)
    store = ResultsStore(config.results_dir)
    store.write_requests(
        ctx.run_id, variant.label, concurrency,
        request_rows(ctx, variant.label, concurrency, result),
    )  # fmt: skip
    row = level_row(ctx, config.server, variant, config.load, facts, result)
    store.write_level(row)
    return row


def teardown(config: SweepConfig, handle: ServerHandle) -> KillReport:
    return runner_for(config.target).stop(handle)
