"""How a server is started on the target: shared by every variant of a sweep."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from specsweep.config.common import EnvMap, ExtraArgs, PositiveInt, _check_path_value, _Model
from specsweep.config.versions import parse_version

WILDCARD_HOSTS = ("0.0.0.0", "::", "")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class ServerSpec(_Model):
    """How to start a server on the target; shared by every variant of a sweep."""

    backend: Literal["sglang", "simulator"] = Field(
        "sglang",
        description="'sglang' runs python -m sglang.launch_server; 'simulator' runs "
        "specsweep's SGLang simulator with the same flags.",
    )
    model_path: str = Field(..., min_length=1, description="--model-path (HF id or local dir).")
    host: str = Field("127.0.0.1", description="--host the server binds and specsweep calls.")
    port: int = Field(30000, ge=1, le=65535, description="--port.")
    tp: PositiveInt = Field(1, description="--tp-size.")
    python: str | None = Field(
        None,
        description="Python executable that has sglang installed (e.g. /opt/sglang/bin/python); "
        "default: python3 for sglang, this interpreter for the simulator.",
    )
    sglang_version: str | None = Field(
        None,
        description="The sglang version the server runs, e.g. 0.5.23. Unset, specsweep asks "
        "server.python (package metadata, else sglang's own __version__); set it when that "
        "sglang cannot say (a source tree without a version, an image without dist-info).",
    )
    launch_prefix: list[str] = Field(
        default_factory=list,
        description="Argv placed before the python executable, e.g. ['numactl', '-N0'].",
    )
    max_running_requests: PositiveInt | None = Field(
        None,
        description="--max-running-requests for every variant. sglang resets it to 48 "
        "when speculation is on and it is unset, so comparisons need it set.",
    )
    context_length: PositiveInt | None = Field(
        None,
        description="--context-length (default: the model's). Set, it also lets specsweep "
        "refuse shapes and prompts that do not fit before anything is launched.",
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment.")
    extra_args: ExtraArgs = Field(
        default_factory=list, description="Further sglang flags, passed verbatim."
    )
    startup_timeout_s: float = Field(
        1800.0, gt=0, description="Give up waiting for readiness after this long."
    )
    start_attempts: PositiveInt = Field(
        2,
        description="Launches tried per variant when the server dies of a transient cause "
        "(port still held, NCCL/bind errors); a crash like CUDA OOM is never retried.",
    )
    stop_grace_s: float = Field(
        15.0,
        gt=0,
        description="Seconds a server (or a stale one) gets after SIGTERM before SIGKILL.",
    )

    @field_validator("model_path")
    @classmethod
    def _model_path_is_a_value(cls, v: str) -> str:
        return _check_path_value("model_path", v)

    @field_validator("sglang_version")
    @classmethod
    def _sglang_version_is_a_version(cls, v: str | None) -> str | None:
        if v is not None and parse_version(v) in (None, (0, 0, 0)):
            raise ValueError(f"{v!r} is not an sglang version (e.g. 0.5.23)")
        return v

    @field_validator("python", "launch_prefix")
    @classmethod
    def _no_nul_in_argv(cls, v: str | list[str] | None) -> str | list[str] | None:
        for part in [v] if isinstance(v, str) else v or []:
            if "\0" in part:
                raise ValueError(f"{part!r} contains a NUL byte")
        return v

    @property
    def base_url(self) -> str:
        """The URL on the server's own host (a wildcard bind is reached on loopback)."""
        return self.url_via("127.0.0.1" if self.host in WILDCARD_HOSTS else self.host)

    def url_via(self, host: str) -> str:
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"
