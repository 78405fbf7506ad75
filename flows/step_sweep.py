"""Step-count sweep: the baseline plus one speculative variant per num_steps."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from specsweep.config.forms import StepSweepForm
from specsweep.config.plan import sweep_variants
from specsweep.flows.hooks import STOP_SERVERS_HOOKS
from specsweep.flows.matrix_sweep import preset_run_name, run_sweep

__all__ = ["step_sweep", "step_sweep_run_name"]


# What the form asked for, whenever the run was created or started (also the worker's name).
step_sweep_run_name = preset_run_name(
    "step-sweep", "steps", lambda config: config.step_sweep.num_steps if config.step_sweep else None
)


def _run_name() -> str:
    return step_sweep_run_name(flow_run.parameters)


@flow(name="step-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def step_sweep(
    config: StepSweepForm, run_id: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Baseline plus one speculative variant per num_steps, at every concurrency level.

    Args:
        config: Target, server, load and the step_sweep section: a SweepConfig or its file's
            mapping (other sweep sections are ignored by this preset) or the form's values.
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
    """
    sweep = config.sweep
    variants = sweep_variants(sweep, "step-sweep")  # every rule checked before any launch
    return run_sweep(sweep, variants, "step-sweep", run_id, force)
