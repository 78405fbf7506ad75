"""Which sglang release the simulator behaves as (``SPECSWEEP_SIM_SGLANG_VERSION``).

On a real host specsweep asks ``importlib.metadata.version('sglang')`` before launching
anything, to know which flags exist; against the simulator it runs::

    python -c "from specsweep.sim.version import simulated_version; print(simulated_version())"

so this module must stay cheap to import (no aiohttp, no profiles). The default is the
release whose source the simulator's newest behaviour was read from (0.5.23).

What the version changes (everything else keeps the 0.5.9 rules of ``server_args``):

* below 0.5.11 ``--speculative-adaptive`` and ``--speculative-adaptive-config`` do not
  exist: argparse's usage line and exit status 2, like any unknown flag;
* from 0.5.11 to 0.5.22 adaptive speculation cannot run with the overlap scheduler
  (in the simulator: ``SGLANG_ENABLE_SPEC_V2`` true) and falls back to static params;
* 0.5.23 and later run it there too, and have FROZEN_KV_MTP, DFLASH, DSPARK, UNO and
  0.5.23's ngram flags and rules (``specsweep.sim.algorithms``).

Pre-releases count as their release (``0.5.11rc1`` has what 0.5.11 has), as
specsweep's own version check reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from specsweep.sim.knobs import (
    DEFAULT_SGLANG_VERSION,
    ENV_SGLANG_VERSION,
    parse_sglang_version,
    sglang_version,
)

ADAPTIVE_SINCE = (0, 5, 11)  # --speculative-adaptive appears
ADAPTIVE_OVERLAP_SINCE = (0, 5, 23)  # adaptive also runs under the overlap scheduler
# FROZEN_KV_MTP, DFLASH, DSPARK, UNO and 0.5.23's ngram flags and rules: read from 0.5.23's
# source only (earlier releases were not checked), so the simulator has them from 0.5.23.
ALGORITHMS_SINCE = (0, 5, 23)

__all__ = [
    "DEFAULT_SGLANG_VERSION",
    "ENV_SGLANG_VERSION",
    "adaptive_runs_with_overlap",
    "has_0523_algorithms",
    "has_adaptive_flags",
    "parse_version",
    "server_info_version",
    "simulated_version",
]


def parse_version(text: str, name: str = ENV_SGLANG_VERSION) -> tuple[int, int, int]:
    """``0.5.23`` -> (0, 5, 23); ValueError naming ``name`` for anything else."""
    return parse_sglang_version(text, name)


def simulated_version(env: Mapping[str, str] = os.environ) -> str:
    """The plain version string the knob selects (default ``0.5.23``); ValueError if bad."""
    return sglang_version(env)


def has_adaptive_flags(version: str) -> bool:
    """Whether that release's launcher knows ``--speculative-adaptive``."""
    return parse_version(version) >= ADAPTIVE_SINCE


def has_0523_algorithms(version: str) -> bool:
    """Whether that release has FROZEN_KV_MTP, DFLASH, DSPARK, UNO and the 0.5.23 ngram flags."""
    return parse_version(version) >= ALGORITHMS_SINCE


def adaptive_runs_with_overlap(version: str) -> bool:
    """Whether that release runs adaptive speculation under the overlap scheduler."""
    return parse_version(version) >= ADAPTIVE_OVERLAP_SINCE


def server_info_version(version: str) -> str:
    """What ``/server_info`` reports: the simulated release, marked as simulated."""
    return f"{version}-sim"
