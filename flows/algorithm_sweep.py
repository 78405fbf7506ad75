"""Algorithm sweep: the baseline plus, per enabled speculative algorithm, its settings."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from specsweep.config.forms import AlgorithmSweepForm
from specsweep.config.plan import sweep_variants
from specsweep.flows.hooks import STOP_SERVERS_HOOKS
from specsweep.flows.matrix_sweep import preset_run_name, run_sweep

__all__ = ["algorithm_sweep", "algorithm_sweep_run_name"]


# What the form asked for, whenever the run was created or started (also the worker's name).
algorithm_sweep_run_name = preset_run_name(
    "algorithm-sweep",
    "algorithms",
    lambda config: config.algorithm_sweep.enabled if config.algorithm_sweep else None,
)


def _run_name() -> str:
    return algorithm_sweep_run_name(flow_run.parameters)


@flow(name="algorithm-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def algorithm_sweep(
    config: AlgorithmSweepForm, run_id: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Baseline plus, per enabled speculative algorithm, its settings, at every level.

    Args:
        config: Target, server, load and the algorithm_sweep section: a SweepConfig or its
            file's mapping (other sweep sections are ignored by this preset) or the form's
            values.
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
    """
    sweep = config.sweep
    variants = sweep_variants(sweep, "algorithm-sweep")  # every rule checked before any launch
    return run_sweep(sweep, variants, "algorithm-sweep", run_id, force)
