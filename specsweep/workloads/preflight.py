"""What the load can and cannot measure, said before anything is launched.

A launch costs minutes of GPU time (8.5 on the seeds' box): a shape that does not fit the
context, a dataset that does not parse or a level the client cannot open sockets for must
stop the run here, and a level that would measure something else than the user thinks (the
server's queue above max_running_requests, random ids where acceptance decides the answer)
must be said here, once.
"""

from __future__ import annotations

import os

from specsweep.config import SweepConfig, Variant
from specsweep.config.command import effective_max_running_requests
from specsweep.errors import ConfigError, DatasetError
from specsweep.loadgen.limits import ensure_open_files, files_for
from specsweep.sim.knobs import ENV_PROFILE as PROFILE_ENV
from specsweep.sim.profiles import get_profile
from specsweep.workloads.fitting import check_workload


def known_context_length(config: SweepConfig) -> int | None:
    """The server's context length when it can be known before launch (None: real sglang
    without --context-length, where the model's config decides and the server refuses a
    request that does not fit, which fails its level)."""
    if config.server.context_length is not None:
        return config.server.context_length
    if config.server.backend != "simulator":
        return None
    ref = config.server.env.get(PROFILE_ENV) or os.environ.get(PROFILE_ENV) or "default"
    try:
        return get_profile(ref).context_length
    except Exception:  # a profile the simulator cannot read fails its launch, with its message
        return None


def check_shapes(config: SweepConfig) -> None:
    limit = known_context_length(config)
    if limit is None:
        return
    for shape in config.load.shape_list():
        if shape.input_len + shape.output_len > limit:
            raise ConfigError(
                f"shape {shape.label}: {shape.input_len} prompt + {shape.output_len} output "
                f"tokens exceed the server's context length {limit}; drop the shape or set "
                "server.context_length (the model must support it)"
            )


def files_needed(config: SweepConfig) -> int:
    """Open files the load generator needs at the highest level: a socket per stream."""
    return files_for(max(config.load.concurrency))


def _queue_warning(config: SweepConfig, variants: list[Variant]) -> str | None:
    caps = {effective_max_running_requests(config.server, v) for v in variants} - {None}
    if not caps:
        return None
    cap = min(caps)
    above = [c for c in config.load.concurrency if c > cap]
    if not above:
        return None
    return (
        f"levels above max_running_requests {cap} (c={', '.join(map(str, above))}) measure "
        f"the server's queue, not a larger batch: at most {cap} requests run at once, the "
        "rest wait (their TTFT grows, throughput does not)"
    )


def _random_ids_warning(config: SweepConfig, variants: list[Variant]) -> str | None:
    speculative = any(not v.is_baseline for v in variants)
    if config.server.backend != "sglang" or not speculative or config.load.text_prompts():
        return None
    return (
        "load.prompts is random: a drafter accepts far fewer tokens on random ids than on "
        "real text, so the speculative variants' accept length and speedups will be "
        "understated; use prompts: builtin (or your own dataset) unless random is the point"
    )


def drives_load_here(config: SweepConfig) -> bool:
    """Whether this process runs the load generator (else the SSH target's does)."""
    t = config.target
    return t.kind != "ssh" or getattr(t, "drive_from", "target") == "orchestrator"


def check_load(config: SweepConfig, variants: list[Variant]) -> list[str]:
    """Refuse what cannot run (ConfigError); return what the user must hear before launch.

    Where this process runs the load generator, its open-file limit is checked (the load
    generator raises it when a level starts, here or on an SSH target)."""
    check_shapes(config)
    try:
        check_workload(config.load, known_context_length(config))
    except DatasetError as exc:
        raise ConfigError(f"load.dataset: {exc}") from None
    notes = [_queue_warning(config, variants), _random_ids_warning(config, variants)]
    if drives_load_here(config):
        notes.append(ensure_open_files(files_needed(config), apply=False))
    return [n for n in notes if n]
