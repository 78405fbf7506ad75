"""The one place that turns a variant into the sglang command line.

Both the real server and the simulator are started from this argv, so what
the tests exercise is exactly what a GPU host runs.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specsweep.config import SPEC_V2_ENV, ServerSpec, SshTarget, SweepConfig, Variant, algorithms
from specsweep.config.algorithms import TREE_ALGORITHMS
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


# sglang's log timestamps carry milliseconds with it: the adaptive trace (which step count
# ran when) is read from the server log's "Switch adaptive runtime state" lines.
LOG_MS_ENV = "SGLANG_LOG_MS"


def variant_env(server: ServerSpec, variant: Variant) -> dict[str, str]:
    env = {**server.env, **variant.env}
    if variant.spec_v2:
        env[SPEC_V2_ENV] = "True"
    if variant.is_adaptive:
        env.setdefault(LOG_MS_ENV, "1")
    return env


def adaptive_config_path(variant: Variant, workdir: str) -> str | None:
    """Where the variant's adaptive tiers file lives on the target (None: default tiers)."""
    name = variant.adaptive.file_name() if variant.adaptive is not None else None
    return None if name is None else f"{workdir.rstrip('/')}/{name}"


def build_launch_command(
    server: ServerSpec,
    variant: Variant,
    *,
    default_python: str | None = None,
    workdir: str = ".specsweep",
    adaptive_config: str | None = None,
) -> LaunchCommand:
    """``default_python``: the interpreter when server.python is unset (an SSH target's);
    ``workdir``: the target's workdir, where an adaptive variant's tiers file is written;
    ``adaptive_config``: that file's path instead (a file the user deploys by hand)."""
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
    if server.context_length is not None:
        argv += ["--context-length", str(server.context_length)]
    if variant.algorithm is not None:
        argv += ["--speculative-algorithm", variant.algorithm]
        if variant.draft_model_path:
            argv += ["--speculative-draft-model-path", variant.draft_model_path]
        if variant.algorithm not in TREE_ALGORITHMS:
            argv += algorithms.launch_args(variant)
        else:
            argv += [
                "--speculative-num-steps",
                str(variant.resolved_num_steps),
                "--speculative-eagle-topk",
                str(variant.resolved_topk),
                "--speculative-num-draft-tokens",
                str(variant.resolved_num_draft_tokens),
            ]
        if variant.adaptive is not None:
            argv.append("--speculative-adaptive")
            path = adaptive_config_path(variant, workdir)
            if path is not None and adaptive_config is not None:
                path = adaptive_config
            if path is not None:
                argv += ["--speculative-adaptive-config", path]
    argv += [*server.extra_args, *variant.extra_args]
    return LaunchCommand(argv=tuple(argv), env=variant_env(server, variant))


def target_workdir(config: SweepConfig) -> str:
    """The target's workdir as the server sees it: absolute on this machine; an SSH
    host's as configured (relative to the remote home) unless resolved by the host."""
    if isinstance(config.target, SshTarget):
        return config.target.workdir
    return str(Path(config.target.workdir).resolve())


def command_for(config: SweepConfig, variant: Variant, workdir: str | None = None) -> LaunchCommand:
    """The command a sweep runs for a variant on its target (an SSH host's python);
    ``workdir``: the target's resolved workdir (default: `target_workdir`)."""
    remote = config.target.python if isinstance(config.target, SshTarget) else None
    return build_launch_command(
        config.server,
        variant,
        default_python=remote,
        workdir=workdir or target_workdir(config),
    )
