"""Top-k sweep: the baseline plus one speculative variant per topk at fixed num_steps."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from specsweep.config.forms import TopkSweepForm
from specsweep.config.plan import sweep_variants
from specsweep.flows.hooks import STOP_SERVERS_HOOKS
from specsweep.flows.matrix_sweep import preset_run_name, run_sweep

# What the form asked for, whenever the run was created or started (also the worker's name).
topk_sweep_run_name = preset_run_name(
    "topk-sweep", "topk", lambda config: config.topk_sweep.topk if config.topk_sweep else None
)


def _run_name() -> str:
    return topk_sweep_run_name(flow_run.parameters)


@flow(name="topk-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def topk_sweep(
    config: TopkSweepForm, run_id: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Baseline plus one speculative variant per topk, at every concurrency level.

    Args:
        config: Target, server, load and the topk_sweep section: a SweepConfig or its file's
            mapping (other sweep sections are ignored by this preset) or the form's values.
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
    """
    sweep = config.sweep
    variants = sweep_variants(sweep, "topk-sweep")  # every rule checked before any launch
    return run_sweep(sweep, variants, "topk-sweep", run_id, force)
