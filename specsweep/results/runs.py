"""The `runs` row: what was asked for, by which code, and how it ended."""

from __future__ import annotations

import json
import platform
import socket
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from specsweep.config import SweepConfig, Variant
from specsweep.config.redact import redact_args, redact_env
from specsweep.config.versions import SglangVersion
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


def _redact_envs(node: Any) -> Any:
    """Every `env` mapping and flag list anywhere in the config (server, variants, sections)."""
    if isinstance(node, dict):
        return {
            k: redact_env(v)
            if k == "env" and isinstance(v, dict)
            else redact_args(v)
            if k in ("extra_args", "launch_prefix") and isinstance(v, list)
            else _redact_envs(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_redact_envs(x) for x in node]
    return node


def redacted_config_json(config: SweepConfig) -> str:
    return json.dumps(_redact_envs(config.model_dump(mode="json")), sort_keys=True)


def environment() -> dict[str, Any]:
    """What ran the sweep: enough to explain a change between two nights."""
    versions = {}
    for dist in ("specsweep", "prefect", "fabric", "pyarrow", "pandas", "pydantic"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "versions": versions,
    }


def run_row(
    config: SweepConfig,
    ctx: RunContext,
    variants: list[Variant],
    errors: dict[str, str],
    started_at: datetime,
    *,
    status: str | None = None,
    phases: dict[str, dict[str, float]] | None = None,
    skipped: list[str] | None = None,
    search_stop: str | None = None,
    sglang: SglangVersion | None = None,
) -> dict[str, Any]:
    """errors: the failed variants, each with the first line of its error; `sglang`: the
    target's version as the version gates read it (None: no variant needed one).

    Written once when the run starts (status ``running``) and again when it ends: a
    run whose orchestrator was killed keeps its ``running`` row, the mark of a partial
    run that ``--resume`` can finish.
    """
    return {
        **ctx.identity(),
        "specsweep_version": specsweep_version(),
        "git_revision": git_revision(),
        "config": redacted_config_json(config),
        "variants": [v.label for v in variants],
        "failed_variants": list(errors),
        "variant_errors": json.dumps(errors),
        "started_at": started_at,
        "ended_at": None if status == "running" else datetime.now(UTC),
        "status": status or ("failed" if errors else "completed"),
        "skipped_variants": list(skipped or []),
        "environment": json.dumps(environment(), sort_keys=True),
        "phases": json.dumps(phases or {}, sort_keys=True),
        "search_stop": search_stop,
        "sglang_version": sglang.text if sglang else None,
        "sglang_version_source": sglang.source if sglang else None,
    }
