"""A fleet: named GPU hosts that one sweep's variants are spread over.

The sweep config says *what* to measure; the fleet says *where*. Each host is a
target (this machine, or an SSH host) plus what differs per host: which GPUs
the server may use and, where hosts share a machine or a port is taken, the
server's port. Prefect does the placing: every host has a worker polling the
fleet's work pool, one flow run at a time, and the host's global concurrency
limit (`specsweep-target-<host>`) is held for each server's whole life.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from specsweep.config import LocalTarget, SweepConfig, Target, check_run_id
from specsweep.config.file import format_validation_error, read_yaml_mapping
from specsweep.errors import ConfigError

# Set by `specsweep fleet worker --host NAME` for the flow runs its worker starts: how a
# variant's flow run knows which fleet host it landed on.
HOST_ENV = "SPECSWEEP_FLEET_HOST"
# Where a variant run that finds its host unavailable leaves a note for its worker,
# which then stops polling until the host passes its pre-flight check again.
MARKER_ENV = "SPECSWEEP_FLEET_MARKER"
DEFAULT_POOL = "specsweep-fleet"


class FleetHost(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., description="The host's name: results' `target` column, its limit.")
    target: Target = Field(
        default_factory=LocalTarget,
        description="How to reach it: local (the worker runs on the GPU host) or ssh.",
    )
    gpus: list[NonNegativeInt] | None = Field(
        None, description="GPU indices the server may use (CUDA_VISIBLE_DEVICES); all if unset."
    )
    port: int | None = Field(
        None, ge=1, le=65535, description="Server port on this host; default: server.port."
    )

    @model_validator(mode="before")
    @classmethod
    def _target_named_after_host(cls, data: Any) -> Any:
        """The host's name is its target's: no second name to keep in step."""
        if isinstance(data, dict) and isinstance(data.get("target"), dict):
            data = {**data, "target": {"name": data.get("name", ""), **data["target"]}}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        check_run_id(value)  # it names files and a Prefect limit: the run-id alphabet
        return value


BaselineMode = Literal["every_host", "per_gpu_kind", "once"]


class Calibration(BaseModel):
    """The short baseline level that checks a host against its GPU kind's reference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: PositiveInt | None = Field(
        None,
        description="The level measured (one of load.concurrency; the first shape); "
        "default: the middle one of load.concurrency.",
    )
    tolerance: float = Field(
        0.02,
        gt=0,
        lt=0.5,
        description="A host whose baseline throughput there differs from the reference's by "
        "more than this (or whose 95% interval excludes parity) measures its own baseline.",
    )


class Fleet(BaseModel):
    """The hosts, the work pool their workers poll, and how lost hosts are handled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("fleet", description="Label recorded as the run's target.")
    hosts: list[FleetHost] = Field(..., min_length=1, description="The GPU hosts.")
    pool: str = Field(DEFAULT_POOL, min_length=1, description="Process work pool of the hosts.")
    max_attempts: PositiveInt = Field(
        3,
        description="Runs of one variant, counting re-runs on another host after its host "
        "was lost (crashed, no heartbeat) or failed its pre-flight check.",
    )
    heartbeat_s: int = Field(
        30, ge=30, description="Flow-run heartbeat period on the hosts (Prefect's minimum: 30)."
    )
    lost_after_s: int = Field(
        90,
        ge=35,
        description="A variant's flow run without a heartbeat for this long is marked Crashed "
        "(its host is lost) and the variant re-runs elsewhere.",
    )
    poll_s: float = Field(1.0, gt=0, description="How often the sweep reads its runs' states.")
    baseline: BaselineMode = Field(
        "per_gpu_kind",
        description="Where the baseline is measured, so speedups compare like with like: "
        "per_gpu_kind (one full baseline per GPU kind; every other host of the kind is "
        "checked with a calibration level and measures its own baseline when it differs), "
        "every_host (a full baseline on every host), once (one baseline anywhere: speedups "
        "may compare hosts).",
    )
    calibration: Calibration = Field(
        default_factory=Calibration, description="The per_gpu_kind check of each host."
    )

    @model_validator(mode="after")
    def _check(self) -> Fleet:
        names = [h.name for h in self.hosts]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"host names must be unique: {', '.join(dupes)}")
        if self.lost_after_s <= self.heartbeat_s:
            raise ValueError(
                f"lost_after_s ({self.lost_after_s}) must exceed heartbeat_s "
                f"({self.heartbeat_s}): a live host would be declared lost between heartbeats"
            )
        return self

    def host(self, name: str) -> FleetHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise ConfigError(
            f"host {name!r} is not in fleet {self.name!r} (hosts: "
            f"{', '.join(h.name for h in self.hosts)})"
        )


def calibration_level(fleet: Fleet, config: SweepConfig) -> int:
    """The concurrency of the calibration level: one the sweep measures anyway, so the
    reference's full baseline holds it too."""
    levels = sorted(config.load.concurrency)
    wanted = fleet.calibration.concurrency
    if wanted is None:
        return levels[len(levels) // 2]
    if wanted not in levels:
        raise ConfigError(
            f"fleet.calibration.concurrency {wanted} is not one of load.concurrency "
            f"({', '.join(map(str, levels))}): the reference's baseline must measure it too"
        )
    return wanted


def check_sweep_pool(fleet: Fleet, sweep_pool: str) -> None:
    """The fleet sweep itself must run outside the hosts' pool."""
    if sweep_pool == fleet.pool:
        raise ConfigError(
            f"the fleet sweep's pool must differ from the hosts' pool {fleet.pool!r}: a sweep "
            "waiting on a host's worker would hold the slot its variants need"
        )


def worker_name(fleet: str, host: str) -> str:
    """The Prefect worker name of a fleet host: how the sweep sees which hosts are up."""
    return f"{fleet}-{host}"


def config_for_host(config: SweepConfig, host: FleetHost) -> SweepConfig:
    """The sweep config as it runs on one host: its target, GPUs and port."""
    target = host.target.model_copy(update={"name": host.name})
    server = config.server
    update: dict[str, Any] = {}
    if host.port is not None:
        update["port"] = host.port
    if host.gpus is not None:
        update["env"] = {**server.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, host.gpus))}
    if update:
        server = server.model_copy(update=update)
    data = config.model_dump(mode="python") | {"target": target, "server": server}
    return SweepConfig.model_validate(data)  # re-checked: a host may make it invalid


def current_host(fleet: Fleet) -> FleetHost:
    """The host whose worker started this process."""
    name = os.environ.get(HOST_ENV)
    if not name:
        raise ConfigError(
            f"{HOST_ENV} is not set: fleet variants run on workers started with "
            f"`specsweep fleet worker --fleet <fleet.yaml> --host <name>`"
        )
    return fleet.host(name)


def parse_fleet(data: dict[str, Any]) -> Fleet:
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc).replace("configuration", "fleet")) from None


def load_fleet(path: Path | str) -> Fleet:
    return parse_fleet(read_yaml_mapping(path, "fleet"))
