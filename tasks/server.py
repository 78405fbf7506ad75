"""Server lifecycle tasks: kill stale, launch, wait for health, teardown."""

from __future__ import annotations

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.states import State

from specsweep import pipeline
from specsweep.config import SweepConfig, Variant
from specsweep.errors import SpecsweepError
from specsweep.health import Readiness, ReadyReport
from specsweep.results.rows import ServerFacts
from specsweep.targets.local import ServerHandle
from tasks import secrets  # noqa: F401 - lets SSH targets read keys from Prefect Secret blocks


def _transient(task: Task, task_run: TaskRun, state: State) -> bool:
    """Retry only OS-level hiccups; a configuration or server error will not fix itself."""
    try:
        state.result()
    except SpecsweepError:
        return False
    except OSError:
        return True
    except Exception:
        return False
    return False


@task(name="kill-stale-gpu-processes", cache_policy=NO_CACHE)
def kill_stale_processes(config: SweepConfig, force: bool = False) -> list[int]:
    logger = get_run_logger()
    report = pipeline.kill_stale_servers(config, force=force)
    for note in report.notes:
        logger.warning(note)
    if report.killed_pids:
        logger.info("killed stale server processes: %s", report.killed_pids)
    else:
        logger.info("no stale servers on port %d", config.server.port)
    return report.killed_pids


@task(
    name="launch-server",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=_transient,
)
def launch_server(config: SweepConfig, variant: Variant, run_id: str) -> ServerHandle:
    handle = pipeline.launch(config, variant, run_id)
    get_run_logger().info(
        "launched %s (pid %d), log: %s\n%s",
        variant.label,
        handle.pid,
        handle.log_path,
        handle.command,
    )
    return handle


@task(name="wait-for-health", cache_policy=NO_CACHE)
def wait_for_health(config: SweepConfig, handle: ServerHandle) -> ServerFacts:
    logger = get_run_logger()

    def progress(state: Readiness, line: str) -> None:
        logger.info("[%s] %s", state, line)

    report: ReadyReport = pipeline.wait_ready(config, handle, on_progress=progress)
    facts = pipeline.facts(config)
    logger.info(
        "server ready after %.1fs (%d polls); sglang %s",
        report.elapsed_s,
        report.polls,
        facts.sglang_version,
    )
    return facts


@task(name="teardown-server", cache_policy=NO_CACHE)
def teardown_server(config: SweepConfig, handle: ServerHandle) -> list[int]:
    report = pipeline.teardown(config, handle)
    logger = get_run_logger()
    if report.escalated:
        logger.warning("server ignored SIGTERM; killed %s", report.killed)
    logger.info("server group %d stopped in %.2fs", report.pgid, report.elapsed_s)
    return report.terminated
