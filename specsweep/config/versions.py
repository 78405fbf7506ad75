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
from typing import Literal

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


# Where a target's sglang version came from, as the runs row records it.
VersionSource = Literal[
    "config", "metadata", "sglang.version.__version__", "sglang.__version__", "simulator"
]


@dataclass(frozen=True)
class SglangVersion:
    """The sglang version a sweep's gates used, and where it was read: the package
    metadata, the package's own ``__version__`` (a source tree or an image without
    dist-info has no metadata), or the config (``server.sglang_version``)."""

    text: str
    source: VersionSource


@dataclass(frozen=True)
class Feature:
    """Something a variant asks of sglang, and the first version that has it."""

    what: str
    since: tuple[int, int, int]
    needed_by: Callable[[Variant], bool]
    note: str = ""


ADAPTIVE = Feature("--speculative-adaptive", (0, 5, 11), lambda v: v.is_adaptive)
ADAPTIVE_OVERLAP = Feature(
    "--speculative-adaptive with the spec v2 overlap scheduler",
    (0, 5, 23),
    lambda v: v.is_adaptive and v.uses_spec_v2,
    " (0.5.11 ran static params instead)",
)
# The algorithms beyond EAGLE/EAGLE3/NEXTN/STANDALONE, with the flags specsweep passes for
# them (--speculative-ngram-*, --speculative-dflash-block-size, ...), were read from
# sglang 0.5.23's source, the only release specsweep can read here; which earlier release
# first had each is not checked, so each is gated at 0.5.23 (lower it when a release's
# source says so).
ALGORITHMS_SINCE_0_5_23 = ("FROZEN_KV_MTP", "NGRAM", "DFLASH", "DSPARK", "UNO")


def _runs(algorithm: str) -> Callable[[Variant], bool]:
    return lambda v: v.algorithm == algorithm


ALGORITHM_FEATURES = tuple(
    Feature(f"--speculative-algorithm {name}", (0, 5, 23), _runs(name))
    for name in ALGORITHMS_SINCE_0_5_23
)
FEATURES: tuple[Feature, ...] = (ADAPTIVE, ADAPTIVE_OVERLAP, *ALGORITHM_FEATURES)


def features_needed(
    variants: list[Variant], verify_policy: bool = False
) -> list[tuple[str, Feature]]:
    """(who, feature) for each versioned feature the sweep will use. `verify_policy`
    launches an adaptive config exported from the run's chains (on the spec v2 path
    when they are)."""
    out = [(v.label, f) for v in variants for f in FEATURES if f.needed_by(v)]
    if verify_policy:
        out.append(("verify_policy", ADAPTIVE))
        if any(v.uses_spec_v2 and v.resolved_topk == 1 for v in variants):
            out.append(("verify_policy", ADAPTIVE_OVERLAP))
    return out


def needs_version_check(variants: list[Variant], verify_policy: bool = False) -> bool:
    """Only a sweep that asks for a versioned feature probes the target."""
    return bool(features_needed(variants, verify_policy))


def check_version(
    variants: list[Variant], version_text: str | None, where: str, verify_policy: bool = False
) -> None:
    """Raise UnsupportedByVersion naming each variant whose flags `version_text` lacks."""
    needed = features_needed(variants, verify_policy)
    version = parse_version(version_text or "")
    if version is None or version == (0, 0, 0):  # 0.0.0.dev0: sglang's own "unknown"
        if needed:
            what = sorted({f.what for _, f in needed})
            raise UnsupportedByVersion(
                f"{where}: cannot tell which sglang it has (the probe said "
                f"{version_text!r}), and {', '.join(what)} needs a known version; check "
                "server.python (the interpreter that has sglang), or state the version it "
                "runs as server.sglang_version"
            )
        return
    problems = [
        f"{who} needs {f.what}, which sglang has from {shown(f.since)}{f.note}"
        for who, f in needed
        if version < f.since
    ]
    if problems:
        raise UnsupportedByVersion(
            f"{where} has sglang {version_text}: "
            + "; ".join(problems)
            + ". Upgrade sglang there, or remove those variants"
        )
