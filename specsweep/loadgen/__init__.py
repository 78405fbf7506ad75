"""The load generator: closed-loop streaming requests against sglang's APIs.

``run_level`` runs one concurrency level (warmup, then one or more measured
passes) and returns its records and summary; ``compute_level_metrics``
re-derives the summary from stored records. ``python -m specsweep.loadgen``
runs one level and prints the result as JSON lines (for a remote GPU host).
"""

from specsweep.loadgen.client import PreparedRequest, stream_request
from specsweep.loadgen.metrics import (
    LevelMetrics,
    RequestRecord,
    compute_level_metrics,
    compute_pass_metrics,
    percentile,
)
from specsweep.loadgen.prompts import level_seed, make_input_ids, make_text_prompts
from specsweep.loadgen.runner import WORKERS_ENV, LevelResult, run_level, run_level_sync
from specsweep.loadgen.wire import parse_result_line, result_to_json

__all__ = [
    "WORKERS_ENV",
    "LevelMetrics",
    "LevelResult",
    "PreparedRequest",
    "RequestRecord",
    "compute_level_metrics",
    "compute_pass_metrics",
    "level_seed",
    "make_input_ids",
    "make_text_prompts",
    "parse_result_line",
    "percentile",
    "result_to_json",
    "run_level",
    "run_level_sync",
    "stream_request",
]
