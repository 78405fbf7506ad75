"""One variant of a fleet sweep, on the host whose worker took the run.

Kept apart from `fleet_sweep` so a host's flow run imports only what measuring
needs (no pandas/matplotlib for the report): every run on a host pays its imports.
"""

from __future__ import annotations

import os
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.runtime import flow_run

from specsweep.config import SweepConfig, Variant
from specsweep.config.fleet import (
    HOST_ENV,
    Fleet,
    config_for_host,
    current_host,
)
from specsweep.errors import ConfigError, HostUnavailable
from specsweep.flows.benchmark_variant import benchmark_variant, variant_label
from specsweep.flows.hooks import FLEET_HOST_HOOKS
from specsweep.flows.prefect_secrets import use_prefect_secrets
from specsweep.results.rows import RunContext
from specsweep.targets.preflight import check_host, mark_unavailable
from specsweep.tasks.server import check_sglang_version

FLEET_VARIANT = "fleet-variant/fleet-variant"  # flow name / deployment name
KIND = "fleet-sweep"
# Every flow run on a fleet host carries this tag; the zombie automation watches only
# these runs (a sweep elsewhere heartbeats every 180 s by default and must not be hit).
HOST_TAG = "specsweep-fleet-host"


def only_levels(config: SweepConfig, levels: list[int]) -> SweepConfig:
    """The config measuring only these concurrency levels (a calibration run). Its rows are
    the host's ordinary rows of the variant, so a full run there later measures only the
    rest. A load of several shapes keeps them all (the level at every shape): its level
    files are named by shape, a one-shape load's are not, so a subset of its shapes would
    be stored under other names than the full run looks for."""
    unknown = sorted(set(levels) - set(config.load.concurrency))
    if unknown or not levels:
        raise ConfigError(
            f"levels {levels} must be some of load.concurrency "
            f"({', '.join(map(str, config.load.concurrency))})"
        )
    load = config.load.model_dump(mode="python") | {"concurrency": sorted(set(levels))}
    return SweepConfig.model_validate(config.model_dump(mode="python") | {"load": load})


def _variant_run_name() -> str:
    label = variant_label(flow_run.parameters.get("variant"))
    return f"fleet-variant/{label}@{os.environ.get(HOST_ENV, 'unknown-host')}"


@flow(
    name="fleet-variant",
    flow_run_name=_variant_run_name,
    **FLEET_HOST_HOOKS,
)
def fleet_variant(
    config: SweepConfig,
    fleet: Fleet,
    variant: Variant,
    run_id: str,
    force: bool = False,
    levels: list[int] | None = None,
) -> list[dict[str, Any]]:
    """One variant of a fleet sweep on the host whose worker took this run.

    Args:
        config: The sweep's config; the host's target, GPUs and port replace its own.
        fleet: The hosts; this run's host is the worker's SPECSWEEP_FLEET_HOST.
        variant: The variant to benchmark at every level.
        run_id: The fleet sweep's run: results land in its store under this host's name.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
        levels: Measure only these concurrency levels (a host's calibration level);
            None: every level.
    """
    logger = get_run_logger()
    use_prefect_secrets()  # an SSH host's key may be a Secret block
    host = current_host(fleet)
    host_config = config_for_host(config, host)
    if levels is not None:
        host_config = only_levels(host_config, levels)
    try:
        facts = check_host(host_config)
    except HostUnavailable as exc:  # the sweep re-runs the variant elsewhere
        mark_unavailable(str(exc))  # ... and this host's worker stops taking work
        raise
    logger.info(
        "%s on host %s (%s, %s GPU(s))%s", variant.label, host.name, facts.gpu_name,
        facts.gpu_count, "" if levels is None else f": only c={', '.join(map(str, levels))}",
    )  # fmt: skip
    check_sglang_version(host_config, [variant])  # hosts of one fleet may differ
    ctx = RunContext(run_id, KIND.replace("-", "_"), config.name, host.name)
    with tags(HOST_TAG):  # the nested run is watched for heartbeats too
        return benchmark_variant(host_config, variant, ctx, force=force)
