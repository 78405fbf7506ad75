"""Which sglang versions have the flags a sweep needs, checked before the first launch.

A flag an sglang version lacks fails late and unhelpfully: an argparse usage line
after a model-free start at best, or (for a combination the version does not
support) a server that silently runs something else. The sweep asks the target
which sglang it has (`specsweep.targets.sglang_version`) and this module says,
from that answer alone, what cannot run there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from specsweep.config.variant import Variant
from specsweep.errors import UnsupportedByVersion

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`0.5.23`, `0.5.11rc1`, `0.5.23-sim`, `0.5.9.post2` -> (0, 5, 23); None if not a version."""
    match = _VERSION.match(text or "")
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def shown(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Feature:
    """Something a variant asks of sglang, and the first version that has it."""

    what: str
    since: tuple[int, int, int]
    needed_by: Callable[[Variant], bool]
    note: str = ""


FEATURES: tuple[Feature, ...] = (
    Feature("--speculative-adaptive", (0, 5, 11), lambda v: v.is_adaptive),
    Feature(
        "--speculative-adaptive with the spec v2 overlap scheduler",
        (0, 5, 23),
        lambda v: v.is_adaptive and v.uses_spec_v2,
        " (0.5.11 ran static params instead)",
    ),
)


def needs_version_check(variants: list[Variant]) -> bool:
    """Only a sweep that asks for a versioned feature probes the target."""
    return any(f.needed_by(v) for f in FEATURES for v in variants)


def check_version(variants: list[Variant], version_text: str | None, where: str) -> None:
    """Raise UnsupportedByVersion naming each variant whose flags `version_text` lacks."""
    version = parse_version(version_text or "")
    if version is None:
        needed = sorted({f.what for f in FEATURES for v in variants if f.needed_by(v)})
        if needed:
            raise UnsupportedByVersion(
                f"{where}: cannot tell which sglang it has (the probe said "
                f"{version_text!r}), and {', '.join(needed)} needs a known version; check "
                "server.python (the interpreter that has sglang)"
            )
        return
    problems = [
        f"{v.label} needs {f.what}, which sglang has from {shown(f.since)}{f.note}"
        for v in variants
        for f in FEATURES
        if f.needed_by(v) and version < f.since
    ]
    if problems:
        raise UnsupportedByVersion(
            f"{where} has sglang {version_text}: "
            + "; ".join(problems)
            + ". Upgrade sglang there, or remove those variants"
        )
