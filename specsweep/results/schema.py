"""The explicit, versioned schema of the results tables.

Readers (pandas, DuckDB, Polars) need nothing from specsweep: every column
below is documented in the README. Bump SCHEMA_VERSION on any change.
"""

from __future__ import annotations

import pyarrow as pa

# 2: levels gained adaptive, adaptive_config, adaptive_steps_share (older files read them null).
# 3: levels gained the 95% intervals (*_lo, *_hi), target_ci and target_ci_met (null before).
# 4: levels may have status "skipped" (an adaptive search did not measure them, `error` says
#    why; every metric null); runs gained search_stop; the predictions table is new.
# 5: load shapes and workloads: levels gained shape (in<input_len>-out<output_len>, a cell is
#    (shape, concurrency)), workload (random-ids, random-words, builtin, jsonl:<file>, ...) and
#    endpoint; requests gained shape and category; predictions gained shape. Older files read
#    them null; a null shape is the level's own in<input_len>-out<output_len>.
# 6: the hosts table is new (a fleet run's baseline plan: which host's baseline each host's
#    variants are compared with, and each host's calibration against its GPU kind).
# 7: runs gained sglang_version and sglang_version_source (the version the gates used, and
#    where it was read: metadata, sglang.version.__version__, sglang.__version__, config);
#    levels gained chunk_tokens_unknown (streams whose chunks did not add up to the usage;
#    their requests rows have null chunk_tokens and max_chunk_tokens).
# 8: levels gained throughput_drift and throughput_drift_source: the drift (relative SD a
#    pass's throughput gets from the server's speed) that this run measured on the target
#    and the throughput intervals used, and "calibrated" or "assumed" (no calibration: the
#    +-1.5% floor). Older files read them null: their intervals assumed the floor.
# 9: levels gained phases: "spread" (the warm-in's last C requests ask for 1/C .. C/C of
#    the output length, the streams enter the passes at spread phases, and a pass's
#    throughput is read over its window, from any of the level's requests) or "together"
#    (in step, as sglang.bench_serving). Older files read it null: their streams started
#    together after a barrier and their output_throughput was the whole pass's.
# 10: requests gained spec_correct_drafts_histogram (sglang's meta_info on /generate: element
#    k counts the request's verify steps that accepted k drafts; the search reads acceptance
#    per draft position from it). Older files and OpenAI endpoints read it null.
SCHEMA_VERSION = 10

_UTC = pa.timestamp("us", tz="UTC")


def _latency(name: str) -> list[pa.Field]:
    return [pa.field(f"{name}_ms_{stat}", pa.float64()) for stat in ("mean", "p50", "p90", "p99")]


# Metric columns, in the order and with the names of loadgen's LevelMetrics.
METRIC_FIELDS: list[pa.Field] = [
    pa.field("completed", pa.int32(), nullable=False),
    pa.field("failed", pa.int32(), nullable=False),
    pa.field("error_rate", pa.float64()),
    pa.field("duration_s", pa.float64()),
    pa.field("input_tokens", pa.int64()),
    pa.field("output_tokens", pa.int64()),
    pa.field("request_throughput", pa.float64()),
    pa.field("output_throughput", pa.float64()),
    pa.field("total_throughput", pa.float64()),
    pa.field("achieved_concurrency", pa.float64()),
    pa.field("steady_output_throughput", pa.float64()),
    pa.field("steady_window_s", pa.float64()),
    *_latency("ttft"),
    *_latency("itl"),
    *_latency("tpot"),
    *_latency("e2e"),
    pa.field("decode_tok_s_per_stream", pa.float64()),
    pa.field("accept_length", pa.float64()),
    pa.field("repeats", pa.int16()),
    pa.field("output_throughput_cv", pa.float64()),
    pa.field("status", pa.string(), nullable=False),
    pa.field("error", pa.string()),
    *[
        pa.field(f"{name}_{end}", pa.float64())
        for name in (
            "output_throughput",
            "request_throughput",
            "ttft_ms_p50",
            "ttft_ms_p99",
            "itl_ms_p50",
            "itl_ms_p99",
        )
        for end in ("lo", "hi")
    ],
    pa.field("target_ci_met", pa.bool_()),
    # ok requests whose stream did not add up to the server's final usage (tokens per chunk
    # unknown: their ITL is left out, no accept length is read from their chunks); 0: all did
    pa.field("chunk_tokens_unknown", pa.int32()),
    pa.field("throughput_drift", pa.float64()),
    pa.field("throughput_drift_source", pa.string()),
]

LEVELS_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("sweep_kind", pa.string(), nullable=False),
        pa.field("sweep_name", pa.string()),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("is_baseline", pa.bool_(), nullable=False),
        pa.field("target", pa.string(), nullable=False),
        pa.field("hostname", pa.string()),
        pa.field("backend", pa.string(), nullable=False),
        pa.field("simulated", pa.bool_(), nullable=False),
        pa.field("sglang_version", pa.string()),
        pa.field("gpu_name", pa.string()),
        pa.field("gpu_count", pa.int16()),
        pa.field("driver_version", pa.string()),
        pa.field("gpu_host", pa.string()),  # hostname of the machine the server ran on
        pa.field("gpu_uuids", pa.string()),  # the server's GPUs (nvidia-smi uuids, comma-joined)
        pa.field("model_path", pa.string(), nullable=False),
        pa.field("draft_model_path", pa.string()),
        pa.field("algorithm", pa.string()),
        pa.field("num_steps", pa.int16()),
        pa.field("topk", pa.int16()),
        pa.field("num_draft_tokens", pa.int16()),
        pa.field("spec_v2", pa.bool_(), nullable=False),
        pa.field("adaptive", pa.bool_()),  # --speculative-adaptive (null in schema 1 files)
        pa.field("adaptive_config", pa.string()),  # JSON of its tiers file; null: default tiers
        pa.field("max_running_requests", pa.int32()),
        pa.field("tp", pa.int16()),
        pa.field("extra_args", pa.string()),  # JSON list
        pa.field("env", pa.string()),  # JSON object, secrets redacted
        pa.field("server_command", pa.string()),  # shell line, secrets redacted
        pa.field("concurrency", pa.int32(), nullable=False),
        pa.field("shape", pa.string()),  # in<input_len>-out<output_len>: with concurrency, the cell
        pa.field("input_len", pa.int32()),
        pa.field("output_len", pa.int32()),
        pa.field("workload", pa.string()),  # random-ids | random-words | builtin | <format>:<file>
        pa.field("endpoint", pa.string()),  # generate | completions | chat
        pa.field("num_requests", pa.int32()),
        pa.field("warmup_requests", pa.int32()),
        pa.field("phases", pa.string()),  # spread | together (load.phases; null before 9)
        pa.field("seed", pa.int64()),
        pa.field("target_ci", pa.float64()),  # load.target_ci (null: fixed request counts)
        pa.field("started_at", _UTC),
        pa.field("ended_at", _UTC),
        *METRIC_FIELDS,
        # JSON: step count -> share of the level's time the server ran it (adaptive only),
        # read from the server log's "Switch adaptive runtime state" lines.
        pa.field("adaptive_steps_share", pa.string()),
    ],
    metadata={"specsweep.table": "levels", "specsweep.schema_version": str(SCHEMA_VERSION)},
)

RUNS_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("sweep_kind", pa.string(), nullable=False),
        pa.field("sweep_name", pa.string()),
        pa.field("target", pa.string()),
        pa.field("hostname", pa.string()),
        pa.field("specsweep_version", pa.string()),
        pa.field("git_revision", pa.string()),
        pa.field("config", pa.string()),  # JSON of the SweepConfig, secrets redacted
        pa.field("variants", pa.list_(pa.string())),
        pa.field("failed_variants", pa.list_(pa.string())),
        pa.field("variant_errors", pa.string()),  # JSON object: variant -> first error line
        pa.field("started_at", _UTC),
        pa.field("ended_at", _UTC),
        pa.field("status", pa.string(), nullable=False),  # running | completed | failed
        pa.field("skipped_variants", pa.list_(pa.string())),  # not run: stop_on_failure
        pa.field("environment", pa.string()),  # JSON: python, platform, library versions
        pa.field("phases", pa.string()),  # JSON: variant -> phase -> seconds
        pa.field("search_stop", pa.string()),  # search: adaptive: why it stopped launching
        pa.field("sglang_version", pa.string()),  # asked before launch (null: no gate asked)
        pa.field("sglang_version_source", pa.string()),  # metadata, ...__version__, config
    ],
    metadata={"specsweep.table": "runs", "specsweep.schema_version": str(SCHEMA_VERSION)},
)

REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("sweep_kind", pa.string(), nullable=False),
        pa.field("sweep_name", pa.string()),
        pa.field("target", pa.string(), nullable=False),
        pa.field("hostname", pa.string()),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("concurrency", pa.int32(), nullable=False),
        pa.field("shape", pa.string()),
        pa.field("repeat", pa.int16(), nullable=False),
        pa.field("index", pa.int32(), nullable=False),  # order of issue within the pass
        pa.field("sent_at", _UTC),
        pa.field("first_token_at", _UTC),
        pa.field("ended_at", _UTC),
        pa.field("ttft_ms", pa.float64()),
        pa.field("e2e_ms", pa.float64()),
        pa.field("tpot_ms", pa.float64()),
        pa.field("prompt_tokens", pa.int32()),
        pa.field("output_tokens", pa.int32()),
        pa.field("chunks", pa.int32()),
        pa.field("max_chunk_tokens", pa.int32()),
        # Arrival of every token-carrying chunk, ms after sent_at, and its new tokens.
        pa.field("chunk_offsets_ms", pa.list_(pa.float32())),
        pa.field("chunk_tokens", pa.list_(pa.int16())),
        pa.field("finish_reason", pa.string()),
        pa.field("spec_verify_ct", pa.int32()),
        pa.field("spec_accept_length", pa.float64()),
        # verify steps by accepted drafts (element k: k accepted), sglang's meta_info
        pa.field("spec_correct_drafts_histogram", pa.list_(pa.int32())),
        pa.field("category", pa.string()),  # the prompt's category (chat, code, ...), if known
        pa.field("error", pa.string()),
    ],
    metadata={"specsweep.table": "requests", "specsweep.schema_version": str(SCHEMA_VERSION)},
)

# A search's model predictions (search: adaptive), never mixed with the measured levels.
# stage "before_launch": what the model predicted for a variant just before it was launched,
# from the measurements made until then (kept beside the measurement: the model's error);
# stage "final": every variant of the grid, from all the run's measurements, with whether it
# was launched and, if not, why.
PREDICTIONS_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("target", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),  # before_launch | final
        pa.field("variant", pa.string(), nullable=False),
        pa.field("num_steps", pa.int16()),
        pa.field("topk", pa.int16()),
        pa.field("num_draft_tokens", pa.int16()),
        pa.field("concurrency", pa.int32(), nullable=False),
        pa.field("shape", pa.string()),
        pa.field("predicted_output_throughput", pa.float64()),
        pa.field("predicted_lo", pa.float64()),  # 95% prediction interval
        pa.field("predicted_hi", pa.float64()),
        pa.field("predicted_accept_length", pa.float64()),
        pa.field("launched", pa.bool_()),
        pa.field("reason", pa.string()),  # why launched / not launched (final: per variant)
        pa.field("fit_on", pa.string()),  # JSON list: the variants whose measurements it used
        pa.field("made_at", _UTC),
    ],
    metadata={"specsweep.table": "predictions", "specsweep.schema_version": str(SCHEMA_VERSION)},
)

# A fleet run's baseline plan, one row per host (fleet.baseline): which host's baseline its
# variants are compared with, and the calibration that decided it. Written by the fleet
# sweep as it decides; the answer compares within a host or a GPU kind, never across.
# role: reference (measures its GPU kind's full baseline), calibrated (its calibration level
# matched the reference: its variants use the reference's baseline), own_baseline (it
# measures its own: every_host, a failed calibration, or an unknown GPU kind).
HOSTS_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("target", pa.string(), nullable=False),  # the host
        pa.field("position", pa.int16(), nullable=False),  # its place in fleet.hosts
        pa.field("mode", pa.string(), nullable=False),  # fleet.baseline
        pa.field("gpu_name", pa.string()),
        pa.field("gpu_count", pa.int16()),
        pa.field("driver_version", pa.string()),
        pa.field("gpu_kind", pa.string()),  # e.g. "1x NVIDIA H200"; null: not known yet
        pa.field("role", pa.string(), nullable=False),
        pa.field("baseline_target", pa.string()),  # whose baseline its variants use
        pa.field("calibration_concurrency", pa.int32()),
        pa.field("calibration_shape", pa.string()),
        pa.field("calibration_ratio", pa.float64()),  # its baseline / the reference's there
        pa.field("calibration_lo", pa.float64()),  # 95% interval of that ratio
        pa.field("calibration_hi", pa.float64()),
        pa.field("tolerance", pa.float64()),
        pa.field("passed", pa.bool_()),
        pa.field("note", pa.string()),
        pa.field("decided_at", _UTC),
    ],
    metadata={"specsweep.table": "hosts", "specsweep.schema_version": str(SCHEMA_VERSION)},
)
