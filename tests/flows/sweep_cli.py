"""A sweep started from the command line in its own process, as a user starts it, on this
test session's Prefect API (the flow tests' temporary server)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from prefect.settings import PREFECT_API_URL


def matrix_sweep_cli(path: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of `specsweep run matrix-sweep -c PATH`."""
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    return [sys.executable, "-m", "specsweep.cli", "run", "matrix-sweep", "-c", str(path)], env
