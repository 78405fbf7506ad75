"""Top-k sweep: the baseline plus one speculative variant per topk at fixed num_steps."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.hooks import STOP_SERVERS_HOOKS
from flows.matrix_sweep import run_sweep
from flows.run_records import run_config
from specsweep.config import SweepConfig
from specsweep.config.plan import sweep_variants


def _run_name() -> str:
    config = run_config()
    topk = ",".join(map(str, config.topk_sweep.topk)) if config.topk_sweep else "?"
    return f"topk-sweep/{config.target.name}/topk={topk}"


@flow(name="topk-sweep", flow_run_name=_run_name, **STOP_SERVERS_HOOKS)
def topk_sweep(
    config: SweepConfig, run_id: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Baseline plus one speculative variant per topk, at every concurrency level.

    Args:
        config: Target, server, load and the topk_sweep section (other sweep sections are
            ignored by this preset).
        run_id: Resume this run: measured levels are skipped. Empty starts a new run.
        force: Also kill processes on the port or GPUs that are not provably specsweep's.
    """
    variants = sweep_variants(config, "topk-sweep")  # every rule checked before any launch
    return run_sweep(config, variants, "topk-sweep", run_id, force)
