"""A rich progress bar per level, fed by the engine's progress sink."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from specsweep.cli.common import console
from specsweep.progress import progress_sink


@contextmanager
def level_progress_bar() -> Iterator[None]:
    """A rich bar per level, fed by the engine's progress sink."""
    columns = (
        TextColumn("{task.description:<32}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        tasks: dict[tuple[str, int], TaskID] = {}

        def sink(variant: str, concurrency: int, done: int, total: int) -> None:
            key = (variant, concurrency)
            if key not in tasks:
                tasks[key] = bar.add_task(f"{variant} c={concurrency}", total=total)
            bar.update(tasks[key], completed=done, total=total)

        with progress_sink(sink):
            yield
