"""`specsweep serve`, `specsweep deploy`, `specsweep worker` and `specsweep limits create`.

These talk to a Prefect server, so Prefect and the flows are imported inside
the commands: the engine (and `specsweep plan`) never imports Prefect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specsweep.cli.common import api_url, console, fail, prefect_env
from specsweep.config import SweepConfig
from specsweep.config.file import load_config
from specsweep.config.schedule import NIGHTLY_CRON, NIGHTLY_TIMEZONE, NightlySchedule
from specsweep.errors import ConfigError, SpecsweepError

limits_app = typer.Typer(
    no_args_is_help=True, help="Prefect global concurrency limits, one per target host."
)

ConfigOpt = Annotated[
    Path,
    typer.Option(
        "--config", "-c", help="Sweep YAML: its target gets a limit; it fills the run forms."
    ),
]
PoolOpt = Annotated[str, typer.Option(help="Process work pool (created by deploy if missing).")]
CronOpt = Annotated[str, typer.Option(help="Cron of the nightly-regression schedule.")]
TzOpt = Annotated[str, typer.Option(help="IANA timezone of the nightly cron.")]


def _config(path: Path) -> SweepConfig:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise fail(exc) from None


def _schedule(cron: str, timezone: str) -> NightlySchedule:
    try:
        return NightlySchedule(cron, timezone)
    except (ValueError, KeyError) as exc:
        raise fail(f"--timezone {timezone}: not an IANA timezone ({exc})") from None


@limits_app.command("create")
def limits_create(config: ConfigOpt) -> None:
    """Create the target's limit (1 slot) on the Prefect server; does nothing if it exists."""
    prefect_env()
    cfg = _config(config)
    url = api_url()
    from specsweep.flows.target_lock import ensure_target_limit, target_lock_name

    name = target_lock_name(cfg)
    try:
        created = ensure_target_limit(name)
    except SpecsweepError as exc:
        raise fail(exc, 1) from None
    console.print(f"{name}: {'created' if created else 'exists'} (limit 1) on {url}")


def serve(
    config: ConfigOpt,
    cron: CronOpt = NIGHTLY_CRON,
    timezone: TzOpt = NIGHTLY_TIMEZONE,
) -> None:
    """Serve every deployment from this process (one machine, no work pool) until Ctrl-C."""
    prefect_env()
    cfg = _config(config)
    api_url()
    from specsweep.deployments.catalogue import serve_all

    serve_all(cfg, _schedule(cron, timezone))


def deploy(
    config: ConfigOpt,
    pool: PoolOpt = "specsweep",
    cron: CronOpt = NIGHTLY_CRON,
    timezone: TzOpt = NIGHTLY_TIMEZONE,
) -> None:
    """Register every deployment with the Prefect server for the pool's workers."""
    prefect_env()
    cfg = _config(config)
    url = api_url()
    from specsweep.deployments.catalogue import CATALOGUE, deploy_all
    from specsweep.flows.target_lock import target_lock_name

    deploy_all(cfg, pool, _schedule(cron, timezone))
    for entry in CATALOGUE:
        when = f"  ({_schedule(cron, timezone).describe()})" if entry.nightly else ""
        console.print(f"deployed {entry.flow.name}/{entry.name}{when}")
    console.print(
        f"pool {pool}, target limit {target_lock_name(cfg)}, API {url}\n"
        f"start a worker: specsweep worker --pool {pool}"
    )


def worker(
    pool: PoolOpt = "specsweep",
    name: Annotated[str | None, typer.Option(help="Worker name (default: Prefect's).")] = None,
    limit: Annotated[
        int | None, typer.Option(help="Flow runs at a time (default: no limit).")
    ] = None,
    label_every: Annotated[
        float, typer.Option(help="Seconds between passes naming and tagging new runs.")
    ] = 2.0,
) -> None:
    """Run the pool's process worker, naming and tagging each new run of the deployments
    as soon as it is created (`prefect worker start` names them only when they start)."""
    prefect_env()
    url = api_url()
    from specsweep.deployments.worker import run_worker

    console.print(f"worker on pool {pool}, API {url}: names new runs every {label_every:g} s")
    run_worker(pool, name, limit, label_every)


def register(app: typer.Typer) -> None:
    """Add these commands to the main CLI."""
    app.command()(serve)
    app.command()(deploy)
    app.command()(worker)
    app.add_typer(limits_app, name="limits")
