"""The bundled prompt set (builtin/prompts.jsonl), read from the installed package.

Kept apart from the file loaders and free of engine imports: the simulator reads
the set too (to tell which category a prompt is) and imports nothing of the engine.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from specsweep.workloads.records import PromptRecord, Workload

BUILTIN_FILE = "prompts.jsonl"


def builtin_text() -> str:
    """The bundled file's text (importlib.resources: also from a wheel or a zip)."""
    return (resources.files("specsweep.workloads") / "builtin" / BUILTIN_FILE).read_text("utf-8")


@cache
def load_builtin() -> Workload:
    """The bundled prompts: about 240 original ones in four categories (builtin/README.md)."""
    records = []
    for n, line in enumerate(builtin_text().splitlines(), start=1):
        if line.strip():
            item = json.loads(line)
            records.append(PromptRecord(item["prompt"], item["category"], None, None, n))
    return Workload("builtin", "builtin", tuple(records))


@cache
def builtin_ids() -> tuple[str, ...]:
    """The ids of the bundled prompts, in file order (the set's tests check them)."""
    return tuple(json.loads(line)["id"] for line in builtin_text().splitlines() if line.strip())
