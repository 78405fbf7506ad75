"""Server lifecycle tasks: kill stale, launch, wait for health, teardown.

Each wraps one step of `specsweep.pipeline.VariantServer` with what Prefect adds:
the step's name in the UI, its logs, and retries where a retry can help.
"""

from __future__ import annotations

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.states import State

from specsweep.config import SweepConfig, Variant
from specsweep.config.versions import SglangVersion
from specsweep.errors import SpecsweepError
from specsweep.pipeline import VariantServer, check_target_version
from specsweep.targets.handle import ServerHandle
from specsweep.targets.health import Readiness
from specsweep.targets.server_facts import ServerFacts
from specsweep.targets.teardown import TeardownReport


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
def kill_stale_processes(server: VariantServer, force: bool = False) -> list[int]:
    logger = get_run_logger()
    report = server.kill_stale(force=force)
    for note in report.notes:
        logger.warning(note)
    if report.killed_pids:
        logger.info("killed stale server processes: %s", report.killed_pids)
    else:
        logger.info("no stale servers on port %d", server.server.port)
    return report.killed_pids


@task(
    name="launch-server",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=_transient,
)
def launch_server(server: VariantServer) -> ServerHandle:
    handle = server.launch()
    get_run_logger().info(
        "launched %s (pid %d), log: %s\n%s",
        server.label,
        handle.pid,
        handle.log_path,
        handle.command,
    )
    return handle


@task(name="wait-for-health", cache_policy=NO_CACHE)
def wait_for_health(server: VariantServer) -> ServerFacts:
    logger = get_run_logger()

    def progress(state: Readiness, line: str) -> None:
        logger.info("[%s] %s", state, line)

    report = server.wait_for_health(on_progress=progress)
    assert server.facts is not None
    logger.info(
        "server ready after %.1fs (%d polls); sglang %s",
        report.elapsed_s,
        report.polls,
        server.facts.sglang_version,
    )
    return server.facts


@task(name="teardown-server", cache_policy=NO_CACHE)
def teardown_server(server: VariantServer) -> TeardownReport | None:
    report = server.teardown()
    if report is not None:
        logger = get_run_logger()
        (logger.info if report.memory_back else logger.warning)(report.summary())
    return report


@task(name="check-sglang-version", cache_policy=NO_CACHE)
def check_sglang_version(config: SweepConfig, variants: list[Variant]) -> SglangVersion | None:
    """Ask the target which sglang it has before any launch, when a variant needs a flag
    that only some versions have (adaptive speculation); a missing one fails the sweep."""
    version = check_target_version(config, variants)
    if version is not None:
        get_run_logger().info(
            "target %s has sglang %s (from %s)", config.target.name, version.text, version.source
        )
    return version
