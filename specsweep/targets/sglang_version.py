"""Ask a target which sglang it has, cheaply: the package's metadata, no model, no GPU.

Run before the first launch of a sweep that needs a versioned flag
(`specsweep.config.versions`), with the interpreter and launch prefix the server
itself would use, so the answer is about the sglang that would run. The simulator
answers for the version it simulates (``SPECSWEEP_SIM_SGLANG_VERSION``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from specsweep.config import ServerSpec
from specsweep.config.command import python_for
from specsweep.config.secrets import is_reference
from specsweep.errors import ConfigError

PROBES = {
    "sglang": "import importlib.metadata as m; print(m.version('sglang'))",
    "simulator": "from specsweep.sim.version import simulated_version; print(simulated_version())",
}
PROBE_TIMEOUT_S = 120.0


def probe_argv(server: ServerSpec, default_python: str | None = None) -> list[str]:
    """The server's own prefix and interpreter, asked for sglang's package version."""
    python = python_for(server, default_python)
    return [*server.launch_prefix, python, "-c", PROBES[server.backend]]


def probe_env(server: ServerSpec) -> dict[str, str]:
    """The server's environment without secret references: the probe needs no secrets."""
    return {k: v for k, v in server.env.items() if not is_reference(v)}


def run_probe(argv: list[str], env: Mapping[str, str], where: str) -> str:
    """Run the probe here; the version it printed, or ConfigError saying what went wrong."""
    try:
        done = subprocess.run(
            argv,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"{where}: cannot ask which sglang it has ({argv[0]}): {exc}") from None
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        err = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise ConfigError(
            f"{where}: cannot ask which sglang it has: `{' '.join(argv[:-1])} -c ...` "
            f"exited {done.returncode}: {err[-1] if err else 'no output'}; check server.python "
            "(the interpreter that has sglang)"
        )
    return lines[-1]
