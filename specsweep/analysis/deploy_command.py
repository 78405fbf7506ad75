"""The exact server command that deploys an exported tier config, rebuilt from the run.

The run's own (redacted) config is stored with its runs row; the export's chains are
variants of it, so the adaptive variant the export describes is built the same way a
verification builds it and its command line comes from the one command builder
(config/command.py). None when the config no longer validates on this machine.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from specsweep.analysis.adaptive_export import TierExport
from specsweep.analysis.verification_plan import verification_variants
from specsweep.config import SweepConfig
from specsweep.config.command import build_launch_command
from specsweep.config.plan import sweep_variants
from specsweep.errors import PolicyExportRefused

TIERS_FILE = "tiers.json"


def run_config(run: dict[str, Any] | None) -> SweepConfig | None:
    """The run's own (redacted) config, when it still validates on this machine."""
    text = (run or {}).get("config")
    if not text:
        return None
    try:
        return SweepConfig.model_validate(json.loads(str(text)))
    except (ValidationError, ValueError):
        return None


def tiers_command(
    run: dict[str, Any] | None, export: TierExport, path: str = TIERS_FILE
) -> str | None:
    """`python -m sglang.launch_server ... --speculative-adaptive --speculative-adaptive-config
    PATH`, shell-quoted; None where the run's config cannot rebuild it."""
    config = run_config(run)
    if config is None:
        return None
    statics = [v for v in sweep_variants(config) if v.adaptive is None]
    try:
        adaptive = verification_variants(statics, export, default_tiers=False)[0]
    except (PolicyExportRefused, IndexError):
        return None
    return build_launch_command(config.server, adaptive, adaptive_config=path).shell()
