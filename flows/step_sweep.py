"""Step-count sweep: the baseline plus one speculative variant per num_steps."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.hooks import STOP_SERVERS_HOOKS
from flows.matrix_sweep import run_sweep
from flows.run_records import run_config
from specsweep.config import SweepConfig
from specsweep.config.plan import sweep_variants

__all__ = ["step_sweep"]


def _run_name() -> str:
    config = run_config()
    steps = ",".join(map(str, config.step_sweep.num_steps)) if config.step_sweep else "?"
    return f"step-sweep/{config.target.name}/steps={steps}"


@flow(name="step-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def step_sweep(
    config: SweepConfig, run_id: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Baseline plus one speculative variant per num_steps, at every concurrency level.

    Args:
        config: Target, server, load and the step_sweep section (other sweep sections are
            ignored by this preset).
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
    """
    variants = sweep_variants(config, "step-sweep")  # every rule checked before any launch
    return run_sweep(config, variants, "step-sweep", run_id, force)
