"""The load generator: closed-loop streaming requests against sglang's /generate.

``run_level`` runs one concurrency level and returns its records and summary;
``compute_level_metrics`` re-derives the summary from stored records.
"""

from specsweep.loadgen.client import stream_generate
from specsweep.loadgen.metrics import (
    LevelMetrics,
    RequestRecord,
    compute_level_metrics,
    percentile,
)
from specsweep.loadgen.prompts import level_seed, make_input_ids
from specsweep.loadgen.runner import LevelResult, run_level, run_level_sync

__all__ = [
    "LevelMetrics",
    "LevelResult",
    "RequestRecord",
    "compute_level_metrics",
    "level_seed",
    "make_input_ids",
    "percentile",
    "run_level",
    "run_level_sync",
    "stream_generate",
]
