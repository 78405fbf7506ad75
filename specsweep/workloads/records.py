"""What a workload is: prompt records from the bundled set or a user's file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WorkloadKind = Literal["random", "builtin", "jsonl", "sharegpt", "replay"]


@dataclass(frozen=True, slots=True)
class PromptRecord:
    """One prompt: its text (None for a replay record without one), its category when
    the source names one, the lengths a replay recorded (or a JSONL line's own
    output_len), and the line of the file it came from (1-based; the entry's index
    in a ShareGPT list)."""

    text: str | None
    category: str | None
    input_len: int | None
    output_len: int | None
    line: int


@dataclass(frozen=True, slots=True)
class Workload:
    """The prompts a load sends: ``kind`` says where they came from, ``name`` is the
    file's name (``"builtin"`` for the bundled set)."""

    kind: WorkloadKind
    name: str
    records: tuple[PromptRecord, ...]

    @property
    def label(self) -> str:
        """The workload's name in result rows: ``builtin``, ``jsonl:prompts.jsonl``, ...

        Random prompts are labelled by ``workload_label`` (``random-ids`` or
        ``random-words``: it depends on the endpoint, which a workload does not know).
        """
        if self.kind in ("builtin", "random"):
            return self.kind
        return f"{self.kind}:{self.name}"

    @property
    def categories(self) -> tuple[str, ...]:
        """The distinct categories of its records, sorted (records without one left out)."""
        return tuple(sorted({r.category for r in self.records if r.category is not None}))
