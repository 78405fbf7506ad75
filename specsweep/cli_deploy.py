"""`specsweep serve`, `specsweep deploy` and `specsweep limits create`.

These talk to a Prefect server, so Prefect and the flows are imported inside
the commands: the engine (and `specsweep plan`) never imports Prefect.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from specsweep.config import SweepConfig
from specsweep.config_file import load_config
from specsweep.errors import ConfigError, SpecsweepError
from specsweep.schedule import NIGHTLY_CRON, NIGHTLY_TIMEZONE, NightlySchedule

console = Console()
err = Console(stderr=True)

limits_app = typer.Typer(
    no_args_is_help=True, help="Prefect global concurrency limits, one per target host."
)

ConfigOpt = Annotated[
    Path,
    typer.Option(
        "--config", "-c", help="Sweep YAML: its target gets a limit; it fills the run forms."
    ),
]
CronOpt = Annotated[str, typer.Option(help="Cron of the nightly-regression schedule.")]
TzOpt = Annotated[str, typer.Option(help="IANA timezone of the nightly cron.")]


def _config(path: Path) -> SweepConfig:
    try:
        return load_config(path)
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None


def _schedule(cron: str, timezone: str) -> NightlySchedule:
    try:
        return NightlySchedule(cron, timezone)
    except (ValueError, KeyError) as exc:
        err.print(f"[bold red]error:[/] --timezone {timezone}: not an IANA timezone ({exc})")
        raise typer.Exit(2) from None


def _prefect_env() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # hosts may be offline
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "specsweep")


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        err.print(
            "[bold red]error:[/] PREFECT_API_URL is not set: start a server "
            "(`prefect server start`) and `prefect config set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api`"
        )
        raise typer.Exit(2)
    return url


@limits_app.command("create")
def limits_create(config: ConfigOpt) -> None:
    """Create the target's limit (1 slot) on the Prefect server; does nothing if it exists."""
    _prefect_env()
    cfg = _config(config)
    url = _api_url()
    from tasks.target_lock import ensure_target_limit, target_lock_name

    name = target_lock_name(cfg)
    try:
        created = ensure_target_limit(name)
    except SpecsweepError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from None
    console.print(f"{name}: {'created' if created else 'exists'} (limit 1) on {url}")


def serve(
    config: ConfigOpt,
    cron: CronOpt = NIGHTLY_CRON,
    timezone: TzOpt = NIGHTLY_TIMEZONE,
) -> None:
    """Serve every deployment from this process (one machine, no work pool) until Ctrl-C."""
    _prefect_env()
    cfg = _config(config)
    _api_url()
    from deployments.catalogue import serve_all

    serve_all(cfg, _schedule(cron, timezone))


def deploy(
    config: ConfigOpt,
    pool: Annotated[str, typer.Option(help="Process work pool (created if missing).")] = (
        "specsweep"
    ),
    cron: CronOpt = NIGHTLY_CRON,
    timezone: TzOpt = NIGHTLY_TIMEZONE,
) -> None:
    """Register every deployment with the Prefect server for the pool's workers."""
    _prefect_env()
    cfg = _config(config)
    url = _api_url()
    from deployments.catalogue import CATALOGUE, deploy_all
    from tasks.target_lock import target_lock_name

    deploy_all(cfg, pool, _schedule(cron, timezone))
    for entry in CATALOGUE:
        when = f"  (nightly: {cron} {timezone})" if entry.nightly else ""
        console.print(f"deployed {entry.flow.name}/{entry.name}{when}")
    console.print(
        f"pool {pool}, target limit {target_lock_name(cfg)}, API {url}\n"
        f"start a worker: prefect worker start --pool {pool}"
    )


def register(app: typer.Typer) -> None:
    """Add these commands to the main CLI."""
    app.command()(serve)
    app.command()(deploy)
    app.add_typer(limits_app, name="limits")
