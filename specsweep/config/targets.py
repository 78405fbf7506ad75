"""Where servers run: this machine, or a GPU host over SSH."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from specsweep.config.common import PositiveInt, _Model


class _TargetBase(_Model):
    name: str = Field("local", description="Label recorded with every result.")
    tolerate_foreign_gpu: bool = Field(
        False,
        description="The GPUs are shared: leave other users' GPU processes alone and count "
        "their memory as the baseline, instead of refusing to launch.",
    )


class LocalTarget(_TargetBase):
    """Servers run on this machine, as this user."""

    kind: Literal["local"] = "local"
    workdir: Path = Field(
        Path(".specsweep"),
        description="Where server logs and the launch state file live.",
    )


class SshTarget(_TargetBase):
    """Servers run on another host, reached over SSH (key auth, host key verified)."""

    kind: Literal["ssh"] = "ssh"
    name: str = Field(..., min_length=1, description="Label recorded with every result.")
    host: str = Field(..., min_length=1, description="Host name or address of the GPU host.")
    port: int = Field(22, ge=1, le=65535, description="SSH port.")
    user: str | None = Field(None, description="Remote user; default: ~/.ssh/config or $USER.")
    key_file: Path | None = Field(
        None, description="Private key file; default: ssh-agent and ~/.ssh/id_* keys."
    )
    key_secret: str | None = Field(
        None,
        description="Name of a Prefect Secret block holding the private key (instead of "
        "key_file). Never logged.",
    )
    passphrase_secret: str | None = Field(
        None, description="Name of a Prefect Secret block holding the key's passphrase."
    )
    verify_host_key: bool = Field(
        True,
        description="Check the host key against known_hosts and refuse unknown or changed "
        "keys. Turning this off trusts whoever answers at that address.",
    )
    known_hosts: Path | None = Field(
        None, description="known_hosts file to verify against; default ~/.ssh/known_hosts."
    )
    connect_timeout_s: float = Field(15.0, gt=0, description="TCP connect + handshake limit.")
    connect_attempts: PositiveInt = Field(
        4, description="Tries per connection (backoff 1, 2, 4 s...) when the host is unreachable."
    )
    command_timeout_s: float = Field(
        120.0, gt=0, description="Limit for short remote commands (cleanup, stop, tail)."
    )
    python: str = Field(
        "python3",
        description="Remote Python that runs specsweep's helper and load generator; the "
        "sglang venv's python has everything they need.",
    )
    workdir: str = Field(
        ".specsweep",
        min_length=1,
        description="Remote directory for logs, the launch record and specsweep's helper "
        "code; relative to the remote home.",
    )
    drive_from: Literal["target", "orchestrator"] = Field(
        "target",
        description="Where health checks and the load generator run: 'target' (on the GPU "
        "host, so the network is not measured) or 'orchestrator' (here, over the network; "
        "the server must listen on an address this machine reaches).",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> SshTarget:
        if self.key_file is not None and self.key_secret is not None:
            raise ValueError("set key_file or key_secret, not both")
        return self

    @model_validator(mode="after")
    def _files_exist(self) -> SshTarget:
        """Read on this machine when connecting: missing, they would fail only then."""
        files = {"key_file": self.key_file}
        if self.verify_host_key:
            files["known_hosts"] = self.known_hosts
        for field, path in files.items():
            if path is not None and not path.expanduser().is_file():
                raise ValueError(f"{field} {path}: no such file on this machine")
        return self

    @property
    def address(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.host}:{self.port}"


def _target_kind(value: object) -> str:
    """A target section without `kind` is the local machine, as before SSH targets existed."""
    if isinstance(value, dict):
        return str(value.get("kind", "local"))
    return str(getattr(value, "kind", "local"))


Target = Annotated[
    Annotated[LocalTarget, Tag("local")] | Annotated[SshTarget, Tag("ssh")],
    Discriminator(_target_kind),
]
