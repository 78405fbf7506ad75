"""The `runs` row: what was asked for, by which code, and how it ended."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from specsweep.config import SweepConfig, Variant
from specsweep.redact import redact_env
from specsweep.results.rows import RunContext


def specsweep_version() -> str:
    try:
        return metadata.version("specsweep")
    except metadata.PackageNotFoundError:
        return "unknown"


def git_revision() -> str | None:
    """The commit of the specsweep checkout, '+dirty' when it has local changes."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev.stdout.strip() + ("+dirty" if dirty else "")


def redacted_config_json(config: SweepConfig) -> str:
    data = config.model_dump(mode="json")
    data["server"]["env"] = redact_env(data["server"]["env"])
    for variant in data.get("variants", []):
        variant["env"] = redact_env(variant["env"])
    if data.get("step_sweep"):
        data["step_sweep"]["env"] = redact_env(data["step_sweep"]["env"])
    return json.dumps(data, sort_keys=True)


def run_row(
    config: SweepConfig,
    ctx: RunContext,
    variants: list[Variant],
    errors: dict[str, str],
    started_at: datetime,
) -> dict[str, Any]:
    """errors: the failed variants, each with the first line of its error."""
    return {
        **ctx.identity(),
        "specsweep_version": specsweep_version(),
        "git_revision": git_revision(),
        "config": redacted_config_json(config),
        "variants": [v.label for v in variants],
        "failed_variants": list(errors),
        "variant_errors": json.dumps(errors),
        "started_at": started_at,
        "ended_at": datetime.now(UTC),
        "status": "failed" if errors else "completed",
    }
