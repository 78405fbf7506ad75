"""Start the simulator exactly as a flow would, for integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from specsweep.config import SweepConfig, Variant
from specsweep.pipeline import VariantServer
from specsweep.results.rows import RunContext


def variant_server(config: SweepConfig, variant: Variant, run_id: str = "t") -> VariantServer:
    """The variant's server life on the config's target, for run ``run_id``."""
    ctx = RunContext(run_id, "test", config.name, config.target.name)
    return VariantServer.for_variant(config, variant, ctx)


@contextmanager
def launched(config: SweepConfig, variant: Variant, run_id: str = "t") -> Iterator[VariantServer]:
    """Stale servers killed and the variant launched, not yet waited for; torn down after."""
    with variant_server(config, variant, run_id) as server:
        server.kill_stale()
        server.launch()
        yield server


@contextmanager
def ready_server(
    config: SweepConfig, variant: Variant, run_id: str = "t"
) -> Iterator[VariantServer]:
    with launched(config, variant, run_id) as server:
        server.wait_for_health()
        yield server
