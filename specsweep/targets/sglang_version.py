"""Ask a target which sglang it has, cheaply: no model, no GPU.

Run before the first launch of a sweep that needs a versioned flag
(`specsweep.config.versions`), with the interpreter and launch prefix the server
itself would use, so the answer is about the sglang that would run. The package
metadata answers first; an sglang without it (a source tree on PYTHONPATH, an image
copied without its dist-info) answers with its own ``sglang.version.__version__`` (or
``sglang.__version__``); a version stated in the config (``server.sglang_version``) is
used without asking. The simulator answers for the version it simulates
(``SPECSWEEP_SIM_SGLANG_VERSION``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import get_args

from specsweep.config import ServerSpec
from specsweep.config.command import python_for
from specsweep.config.secrets import is_reference
from specsweep.config.versions import SglangVersion, VersionSource
from specsweep.errors import ConfigError

# Prints "<version> <source>". Without metadata, importing sglang is the only way to its
# version (version.py may read a setuptools-scm file or git); an import that fails there
# is said as such, so the user is not sent to server.python when it is right.
SGLANG_PROBE = """\
import importlib.metadata as m, importlib.util as u, sys
try:
    print(m.version("sglang"), "metadata")
    sys.exit(0)
except m.PackageNotFoundError:
    pass
if u.find_spec("sglang") is None:
    sys.exit("NO_SGLANG: no module named sglang")
errors = []
for name in ("sglang.version", "sglang"):
    try:
        print(__import__(name, fromlist=["__version__"]).__version__, name + ".__version__")
        sys.exit(0)
    except Exception as exc:
        errors.append(f"{name}.__version__: {type(exc).__name__}: {exc}")
why = "; ".join(errors)
sys.exit(f"NO_VERSION: sglang has no package metadata and no readable version ({why})")
"""
PROBES = {
    "sglang": SGLANG_PROBE,
    "simulator": "from specsweep.sim.version import simulated_version; "
    "print(simulated_version(), 'simulator')",
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
        last = err[-1] if err else "no output"
        hint = (
            "state the version it runs as server.sglang_version"
            if last.startswith("NO_VERSION")
            else "check server.python (the interpreter that has sglang), or state the "
            "version as server.sglang_version"
        )
        last = last.removeprefix("NO_VERSION: ").removeprefix("NO_SGLANG: ")
        raise ConfigError(
            f"{where}: cannot ask which sglang it has: `{' '.join(argv[:-1])} -c ...` "
            f"exited {done.returncode}: {last}; {hint}"
        )
    return lines[-1]


def probed_version(line: str) -> SglangVersion:
    """The probe's "<version> <source>" line (a bare version: the metadata, as older
    agents printed it)."""
    text, _, source = line.strip().partition(" ")
    sources: dict[str, VersionSource] = {s: s for s in get_args(VersionSource)}
    return SglangVersion(text, sources.get(source, "metadata"))
