"""Start the simulator exactly as a flow would, for integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from specsweep import pipeline
from specsweep.config import SweepConfig, Variant
from specsweep.targets.local import ServerHandle


@contextmanager
def launched(config: SweepConfig, variant: Variant, run_id: str = "t") -> Iterator[ServerHandle]:
    handle = pipeline.launch(config, variant, run_id)
    try:
        yield handle
    finally:
        pipeline.teardown(config, handle)


@contextmanager
def ready_server(config: SweepConfig, variant: Variant) -> Iterator[ServerHandle]:
    with launched(config, variant) as handle:
        pipeline.wait_ready(config, handle)
        yield handle
