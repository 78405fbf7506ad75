"""Build result rows from what was configured and what was measured."""

from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from specsweep.config import LoadSpec, ServerSpec, Variant, check_run_id
from specsweep.config.command import (
    LaunchCommand,
    build_launch_command,
    effective_max_running_requests,
)
from specsweep.config.redact import redact_args, redact_env
from specsweep.results.schema import SCHEMA_VERSION
from specsweep.workloads.loaders import workload_label

if TYPE_CHECKING:  # the targets are never loaded to build or read rows
    from specsweep.loadgen.metrics import RequestRecord
    from specsweep.loadgen.runner import LevelResult
    from specsweep.targets.server_facts import ServerFacts


@dataclass(frozen=True)
class RunContext:
    """Identity shared by every row of one run."""

    run_id: str
    sweep_kind: str
    sweep_name: str
    target: str
    hostname: str = socket.gethostname()

    def __post_init__(self) -> None:
        check_run_id(self.run_id)  # it names folders: refused before anything is written

    def identity(self) -> dict[str, Any]:
        """The columns every table of the store starts with."""
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "sweep_kind": self.sweep_kind,
            "sweep_name": self.sweep_name,
            "target": self.target,
            "hostname": self.hostname,
        }


def variant_columns(
    server: ServerSpec, variant: Variant, cmd: LaunchCommand | None = None
) -> dict[str, Any]:
    """``cmd``: the command that ran (an SSH target's python); default: the local one."""
    cmd = cmd or build_launch_command(server, variant)
    return {
        "variant": variant.label,
        "is_baseline": variant.is_baseline,
        "backend": server.backend,
        "model_path": server.model_path,
        "draft_model_path": variant.draft_model_path,
        "algorithm": variant.algorithm,
        "num_steps": variant.resolved_num_steps,
        "topk": variant.resolved_topk,
        "num_draft_tokens": variant.resolved_num_draft_tokens,
        "spec_v2": variant.uses_spec_v2,
        "adaptive": variant.is_adaptive,
        "adaptive_config": variant.adaptive.config_json() if variant.adaptive else None,
        "max_running_requests": effective_max_running_requests(server, variant),
        "tp": server.tp,
        "extra_args": json.dumps(redact_args([*server.extra_args, *variant.extra_args])),
        "env": json.dumps(redact_env(cmd.env), sort_keys=True),
        "server_command": cmd.shell(),
    }


def facts_columns(server: ServerSpec, facts: ServerFacts | None) -> dict[str, Any]:
    """What the server said about itself and its GPUs (None: it was never started)."""
    simulated = server.backend == "simulator"
    if facts is None:
        return {"simulated": simulated}
    return {
        "simulated": facts.simulated or simulated,
        "sglang_version": facts.sglang_version,
        "gpu_name": facts.gpu_name,
        "gpu_count": facts.gpu_count,
        "driver_version": facts.driver_version,
        "gpu_host": facts.gpu_host,
        "gpu_uuids": facts.gpu_uuids,
    }


def level_row(
    ctx: RunContext,
    server: ServerSpec,
    variant: Variant,
    load: LoadSpec,
    facts: ServerFacts,
    result: LevelResult,
    cmd: LaunchCommand | None = None,
    steps_share: dict[int, float] | None = None,
) -> dict[str, Any]:
    """``steps_share``: an adaptive server's share of the level's time at each step count."""
    c = result.metrics.concurrency
    return {
        **ctx.identity(),
        **facts_columns(server, facts),
        **variant_columns(server, variant, cmd),
        "concurrency": c,
        **load_columns(load),
        "num_requests": load.num_requests(c),
        "warmup_requests": load.num_warmup(c),
        "phases": load.phases,
        "seed": load.seed,
        "target_ci": load.target_ci,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
        **result.metrics.as_dict(),
        "adaptive_steps_share": None if steps_share is None else steps_share_json(steps_share),
    }


def skipped_level_row(
    ctx: RunContext,
    server: ServerSpec,
    variant: Variant,
    load: LoadSpec,
    facts: ServerFacts | None,
    concurrency: int,
    reason: str,
    cmd: LaunchCommand | None = None,
) -> dict[str, Any]:
    """A level an adaptive search chose not to measure: what would have run and why not,
    every metric null (no number is invented for it)."""
    now = datetime.now(UTC)
    return {
        **ctx.identity(),
        **facts_columns(server, facts),
        **variant_columns(server, variant, cmd),
        "concurrency": concurrency,
        **load_columns(load),
        "num_requests": 0,
        "warmup_requests": 0,
        "phases": load.phases,
        "seed": load.seed,
        "target_ci": load.target_ci,
        "started_at": now,
        "ended_at": now,
        "completed": 0,
        "failed": 0,
        "status": "skipped",
        "error": reason,
    }


def load_columns(load: LoadSpec) -> dict[str, Any]:
    """The cell's shape and what was sent: `load` is one shape's (LoadSpec.for_shape)."""
    return {
        "shape": load.shape.label,
        "input_len": load.input_len,
        "output_len": load.output_len,
        "workload": workload_label(load),
        "endpoint": load.resolved_endpoint(),
    }


def steps_share_json(share: dict[int, float]) -> str:
    """`{"0": 0.08, "1": 0.92}`: step counts in order, shares rounded to 4 digits."""
    return json.dumps({str(k): round(v, 4) for k, v in sorted(share.items())})


def parse_shares(text: object) -> dict[int, float] | None:
    """`adaptive_steps_share` read back: step count -> share of the level's time; None when
    the trace is missing (a static variant, no log lines, or a file before schema 2)."""
    if text is None or (isinstance(text, float) and math.isnan(text)) or text == "":
        return None
    return {int(k): float(v) for k, v in json.loads(str(text)).items()}


def _wall(result: LevelResult, perf_time: float) -> datetime:
    return result.started_at + timedelta(seconds=perf_time - result.perf_origin)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def request_row(
    ctx: RunContext,
    variant: str,
    concurrency: int,
    result: LevelResult,
    rec: RequestRecord,
    shape: str | None = None,
) -> dict[str, Any]:
    first = rec.chunk_times[0] if rec.chunk_times else None
    return {
        **ctx.identity(),
        "variant": variant,
        "concurrency": concurrency,
        "shape": shape,
        "repeat": rec.repeat,
        "index": rec.index,
        "sent_at": _wall(result, rec.start),
        "first_token_at": None if first is None else _wall(result, first),
        "ended_at": _wall(result, rec.end),
        "ttft_ms": _ms(rec.ttft),
        "e2e_ms": _ms(rec.e2e),
        "tpot_ms": _ms(rec.tpot),
        "prompt_tokens": rec.prompt_tokens,
        "output_tokens": rec.output_tokens,
        "chunks": len(rec.chunk_tokens),
        # unknown tokens per chunk are stored as unknown (null), never as one token each
        "max_chunk_tokens": max(rec.chunk_tokens, default=0) if rec.chunk_tokens_known else None,
        "chunk_offsets_ms": [(t - rec.start) * 1000.0 for t in rec.chunk_times],
        "chunk_tokens": list(rec.chunk_tokens) if rec.chunk_tokens_known else None,
        "finish_reason": rec.finish_reason,
        "spec_verify_ct": rec.spec_verify_ct,
        "spec_accept_length": rec.spec_accept_length,
        "spec_correct_drafts_histogram": (
            None
            if rec.spec_correct_drafts_histogram is None
            else list(rec.spec_correct_drafts_histogram)
        ),
        "category": rec.category,
        "error": rec.error,
    }


def request_rows(
    ctx: RunContext, variant: str, concurrency: int, result: LevelResult, shape: str | None = None
) -> list[dict[str, Any]]:
    return [request_row(ctx, variant, concurrency, result, r, shape) for r in result.records]
