"""`specsweep fleet ...`: one sweep over many GPU hosts through a Prefect server.

    specsweep fleet check  --fleet fleet.yaml -c sweep.yaml   # every host's pre-flight
    specsweep fleet deploy --fleet fleet.yaml -c sweep.yaml   # pools, limits, automation
    specsweep fleet worker --fleet fleet.yaml --host gpu-a    # on (or for) each host
    specsweep fleet run    --fleet fleet.yaml -c sweep.yaml   # the sweep, from here

Prefect and the flows load inside the commands (the engine never imports Prefect).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from specsweep.cli.common import (
    api_url,
    console,
    ephemeral_api_ready,
    err,
    fail,
    prefect_env,
    show_outcome,
)
from specsweep.config import SweepConfig, check_run_id
from specsweep.config.file import load_config
from specsweep.config.fleet import Fleet, check_sweep_pool, config_for_host, load_fleet
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError, SpecsweepError, SweepFailed
from specsweep.fleet.hosts import host_queue
from specsweep.targets.preflight import check_host

fleet_app = typer.Typer(
    no_args_is_help=True, help="Spread one sweep over many GPU hosts (a Prefect work pool)."
)

FleetOpt = Annotated[Path, typer.Option("--fleet", "-f", help="Fleet YAML: the GPU hosts.")]
ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Sweep YAML: what to measure.")]


def _use_prefect_secrets() -> None:
    """Hosts' SSH keys may live in Prefect Secret blocks, read through the Prefect API."""
    from specsweep.flows.prefect_secrets import use_prefect_secrets

    use_prefect_secrets()


def _load(fleet_path: Path, config_path: Path | None) -> tuple[Fleet, SweepConfig | None]:
    try:
        fleet = load_fleet(fleet_path)
        config = load_config(config_path) if config_path is not None else None
        if config is not None:
            sweep_variants(config)
            for host in fleet.hosts:
                config_for_host(config, host)  # a host's port/GPUs must make a valid config
    except (ConfigError, ValueError) as exc:
        raise fail(exc) from None
    return fleet, config


@fleet_app.command("check")
def check(fleet: FleetOpt, config: ConfigOpt) -> None:
    """Run every host's pre-flight check (reachable, results store writable, GPUs)."""
    ephemeral_api_ready()  # secret: references are read through Prefect's API
    _use_prefect_secrets()
    fl, cfg = _load(fleet, config)
    assert cfg is not None
    table = Table(title=f"fleet {fl.name}", title_justify="left")
    for col in ("host", "target", "status", "GPUs"):
        table.add_column(col)
    down = 0
    for host in fl.hosts:
        try:
            facts = check_host(config_for_host(cfg, host))
            gpus = f"{facts.gpu_count or '?'} x {facts.gpu_name or '?'}"
            table.add_row(host.name, host.target.kind, "[green]ok[/]", gpus)
        except SpecsweepError as exc:
            down += 1
            table.add_row(host.name, host.target.kind, f"[red]{exc}[/]", "")
    console.print(table)
    raise typer.Exit(1 if down else 0)


@fleet_app.command("deploy")
def deploy(
    fleet: FleetOpt,
    config: ConfigOpt,
    sweep_pool: Annotated[
        str, typer.Option(help="Pool whose worker runs fleet-sweep itself (not a host's).")
    ] = "specsweep",
) -> None:
    """Register fleet-variant (hosts' pool) and fleet-sweep, host queues and limits, zombie
    automation."""
    prefect_env()
    fl, cfg = _load(fleet, config)
    assert cfg is not None
    try:
        check_sweep_pool(fl, sweep_pool)  # before the API is asked anything
    except ConfigError as exc:
        raise fail(exc) from None
    url = api_url()
    from specsweep.deployments.fleet import ZOMBIE_AUTOMATION, deploy_fleet

    try:
        ids = deploy_fleet(cfg, fl, sweep_pool=sweep_pool)
    except (SpecsweepError, ValueError) as exc:
        raise fail(exc, 1) from None
    console.print(f"{len(ids)} deployments on {url}: fleet-variant/fleet-variant (pool "
                  f"{fl.pool}), fleet-sweep/fleet-sweep (pool {sweep_pool})")  # fmt: skip
    console.print(f"host limits: {', '.join('specsweep-target-' + h.name for h in fl.hosts)}")
    console.print(f"host queues in {fl.pool}: {', '.join(host_queue(h.name) for h in fl.hosts)}")
    console.print(f"automation: {ZOMBIE_AUTOMATION} (lost after {fl.lost_after_s} s)")
    console.print("next, on each host: specsweep fleet worker --fleet <fleet.yaml> --host <name>")


@fleet_app.command("worker")
def worker(
    fleet: FleetOpt,
    host: Annotated[str, typer.Option(help="This worker's host, a name in the fleet file.")],
    skip_check: Annotated[
        bool, typer.Option(help="Start without the host's pre-flight check.")
    ] = False,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Sweep YAML for the pre-flight check.")
    ] = None,
    recheck_s: Annotated[
        float, typer.Option(help="While the host is unavailable, re-check it this often.")
    ] = 60.0,
) -> None:
    """Run the host's Prefect worker (one flow run at a time), polling the pool and the
    host's own queue (its pinned baselines). A host failing its pre-flight check gets no
    worker; one that fails it later takes no work until it passes again. The check's GPU
    facts are published for the sweep's baseline plan."""
    prefect_env()
    fl, cfg = _load(fleet, config)
    try:
        entry = fl.host(host)
    except ConfigError as exc:
        raise fail(exc) from None
    _use_prefect_secrets()
    facts = None
    if not skip_check and cfg is not None:
        try:
            facts = check_host(config_for_host(cfg, entry))
        except SpecsweepError as exc:
            err.print(f"[bold red]host {host} skipped:[/] {exc}", soft_wrap=True)
            raise typer.Exit(1) from None
        console.print(f"host {host}: ok ({facts.gpu_count or '?'} x {facts.gpu_name or '?'})")
    api_url()
    from specsweep.deployments.fleet_worker import publish_facts, run_host_worker

    # The sweep groups hosts by GPU kind from these before anything runs; unchecked, a host
    # has an unknown kind (it measures its own baseline), never a stale one.
    publish_facts(fl.pool, host, facts)

    def recheck() -> None:
        assert cfg is not None
        check_host(config_for_host(cfg, entry))

    console.print(
        f"worker {fl.name}-{host} on pool {fl.pool}: one flow run at a time"
        + ("" if cfg else "; without -c a host marked unavailable re-opens after --recheck-s")
    )
    run_host_worker(fl, entry, recheck if cfg is not None else None, recheck_s)


@fleet_app.command("run")
def run(
    fleet: FleetOpt,
    config: ConfigOpt,
    run_id: Annotated[
        str | None, typer.Option("--run-id", "--resume", help="Resume this run.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Also kill processes not provably ours.")] = False,
) -> None:
    """Run the fleet sweep from this process; the hosts' workers run the variants."""
    prefect_env()
    fl, cfg = _load(fleet, config)
    assert cfg is not None
    try:
        if run_id is not None:
            check_run_id(run_id)
    except ConfigError as exc:
        raise fail(exc) from None
    api_url()
    from specsweep.flows.fleet_sweep import fleet_sweep
    from specsweep.results.store import ResultsStore

    try:
        result = fleet_sweep(cfg, fl, run_id=run_id, force=force)
        run_id, code = result["run_id"], 0
        answer = result.get("answer") or {}
    except SweepFailed as exc:
        err.print(f"[bold red]{exc}[/]")
        run_id, code, answer = exc.run_id, 1, {}
    except ConfigError as exc:
        raise fail(exc) from None
    except SpecsweepError as exc:
        raise fail(exc, 1) from None
    show_outcome(ResultsStore(cfg.results_dir), run_id, answer)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app, name="fleet")
