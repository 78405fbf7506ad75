"""What the simulator benchmarks share (adaptive_policy.py, search_savings.py): progress on
stderr, a loopback port, the weak-drafter profile and where a case's profile comes from."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any, Protocol

import yaml

# `extends: default` with a draft head trained on another distribution.
WEAK_DRAFTER: dict[str, Any] = {
    "name": "weak-drafter",
    "extends": "default",
    "description": "default's timing with a weak drafter (acceptance.p 0.30)",
    "assumptions": "As default, except that the draft head accepts 30% of first "
    "draft tokens (decay 0.85 per depth, as default).",
    "acceptance": {"p": 0.30},
}


class ProfileCase(Protocol):
    key: str
    profile: str | None  # a bundled profile name
    file: dict[str, Any] | None  # or a profile file written to --out


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile_ref(case: ProfileCase, out: Path) -> str:
    """SPECSWEEP_SIM_PROFILE for the case: a bundled name, or the file written to out."""
    if case.file is None:
        assert case.profile is not None
        return case.profile
    path = out / "profiles" / f"{case.key}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(case.file, sort_keys=False))
    return str(path)
