"""A fleet host's pre-flight check, before its worker takes work or its server launches."""

from __future__ import annotations

import os
from pathlib import Path

from specsweep.config import SweepConfig
from specsweep.config.fleet import MARKER_ENV
from specsweep.errors import HostUnavailable, SpecsweepError
from specsweep.results.preflight import check_results_dir
from specsweep.targets import host_for
from specsweep.targets.server_facts import ServerFacts


def check_host(config: SweepConfig, n_variants: int = 1) -> ServerFacts:
    """A host's pre-flight, before its server is launched: the results store takes a
    write from here, the host answers (SSH, its python, nvidia-smi) and, for real
    sglang, shows GPUs. Any failure is HostUnavailable: the variant goes elsewhere."""
    name = config.target.name
    try:
        check_results_dir(config, n_variants)
        facts = host_for(config.target).facts(config.server)
    except SpecsweepError as exc:
        raise HostUnavailable(f"host {name} failed its pre-flight check: {exc}") from exc
    if config.server.backend == "sglang" and not facts.gpu_count:
        raise HostUnavailable(
            f"host {name} failed its pre-flight check: nvidia-smi shows no GPU "
            f"(CUDA_VISIBLE_DEVICES={config.server.env.get('CUDA_VISIBLE_DEVICES', 'unset')})"
        )
    return facts


def mark_unavailable(reason: str) -> None:
    """Tell this host's worker (through its marker file) to take no work for now."""
    marker = os.environ.get(MARKER_ENV)
    if marker:
        Path(marker).write_text(reason)
