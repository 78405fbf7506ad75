"""Running a sweep flow from the command line: shared by `run`, `demo` and `policy verify`."""

from __future__ import annotations

from importlib import import_module

import typer

from specsweep.cli.common import ephemeral_api_ready, err, fail, show_outcome
from specsweep.cli.progress import level_progress_bar
from specsweep.config import SweepConfig, check_run_id
from specsweep.config.plan import SweepKind
from specsweep.errors import ConfigError, SpecsweepError, SweepFailed
from specsweep.results.store import ResultsStore


def run_sweep_now(kind: SweepKind, config: SweepConfig, run_id: str | None, force: bool) -> None:
    """Run a sweep flow in this process (Prefect's ephemeral API unless one is set), show
    its outcome and exit: 0 done, 1 variants failed, 2 bad input (nothing launched)."""
    try:
        if run_id is not None:
            check_run_id(run_id)  # it names folders; the flow checks it too
    except ConfigError as exc:
        raise fail(exc) from None
    ephemeral_api_ready()
    # Prefect loads only when running: specsweep.flows.<kind> holds the flow of the same name.
    from specsweep.flows.target_lock import ensure_target_limit, target_lock_name

    sweep_flow = getattr(
        import_module(f"specsweep.flows.{kind.replace('-', '_')}"), kind.replace("-", "_")
    )
    try:
        ensure_target_limit(target_lock_name(config))  # this run's API, ephemeral or not
        with level_progress_bar():
            result = sweep_flow(config, run_id=run_id, force=force)
        run_id, code = result["run_id"], 0
        answer = result.get("answer") or {}
    except SweepFailed as exc:
        err.print(f"[bold red]{exc}[/]")
        run_id, code, answer = exc.run_id, 1, {}
    except ConfigError as exc:  # found inside the flow (e.g. the results dir), nothing ran
        raise fail(exc) from None
    except SpecsweepError as exc:
        raise fail(exc, 1) from None
    if run_id:
        show_outcome(ResultsStore(config.results_dir), run_id, answer)
    raise typer.Exit(code)
