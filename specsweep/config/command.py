"""The one place that turns a variant into the sglang command line.

Both the real server and the simulator are started from this argv, so what
the tests exercise is exactly what a GPU host runs.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from specsweep.config import SPEC_V2_ENV, ServerSpec, SshTarget, SweepConfig, Variant
from specsweep.config.redact import redact_args, redact_env

MODULES = {
    "sglang": "sglang.launch_server",
    "simulator": "specsweep.sim.launch_server",
}


@dataclass(frozen=True)
class LaunchCommand:
    """Argv plus the environment variables added on top of the target's own."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def shell(self, *, redact: bool = True) -> str:
        """A copy-pasteable shell line with every part quoted; secrets hidden by default."""
        env = redact_env(self.env) if redact else dict(self.env)
        argv = redact_args(self.argv) if redact else list(self.argv)
        prefix = ["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else []
        return shlex.join([*prefix, *argv])


def python_for(server: ServerSpec, default: str | None = None) -> str:
    """server.python, else the target's (an SSH host's python), else a local default."""
    if server.python:
        return server.python
    if default:
        return default
    return sys.executable if server.backend == "simulator" else "python3"


def effective_max_running_requests(server: ServerSpec, variant: Variant) -> int | None:
    return variant.max_running_requests or server.max_running_requests


def variant_env(server: ServerSpec, variant: Variant) -> dict[str, str]:
    env = {**server.env, **variant.env}
    if variant.spec_v2:
        env[SPEC_V2_ENV] = "True"
    return env


def build_launch_command(
    server: ServerSpec, variant: Variant, *, default_python: str | None = None
) -> LaunchCommand:
    """``default_python``: the interpreter when server.python is unset (an SSH target's)."""
    argv: list[str] = [
        *server.launch_prefix,
        python_for(server, default_python),
        "-m",
        MODULES[server.backend],
        "--model-path",
        server.model_path,
        "--host",
        server.host,
        "--port",
        str(server.port),
        "--tp-size",
        str(server.tp),
    ]
    mrr = effective_max_running_requests(server, variant)
    if mrr is not None:
        argv += ["--max-running-requests", str(mrr)]
    if variant.algorithm is not None:
        argv += ["--speculative-algorithm", variant.algorithm]
        if variant.draft_model_path:
            argv += ["--speculative-draft-model-path", variant.draft_model_path]
        argv += [
            "--speculative-num-steps",
            str(variant.num_steps),
            "--speculative-eagle-topk",
            str(variant.topk),
            "--speculative-num-draft-tokens",
            str(variant.resolved_num_draft_tokens),
        ]
    argv += [*server.extra_args, *variant.extra_args]
    return LaunchCommand(argv=tuple(argv), env=variant_env(server, variant))


def command_for(config: SweepConfig, variant: Variant) -> LaunchCommand:
    """The command a sweep runs for a variant on its target (an SSH host's python)."""
    remote = config.target.python if isinstance(config.target, SshTarget) else None
    return build_launch_command(config.server, variant, default_python=remote)
