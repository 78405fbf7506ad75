"""Checks that run before any server is launched: a sweep must not burn GPU hours
and then fail to write what it measured."""

from __future__ import annotations

import errno
import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from specsweep.config import SweepConfig
from specsweep.errors import ConfigError
from specsweep.results.location import ResultsRoot, local_path

log = logging.getLogger(__name__)

_PROBE_BYTES = 256 * 1024
_REMOTE_PROBE_BYTES = 1024  # an object store has no "disk full"; one small PUT proves access
_BYTES_PER_REQUEST = 4 * 1024  # a request row with its chunk timestamps, compressed: ~1-2 KB
_BYTES_PER_LEVEL = 64 * 1024


def results_bytes_needed(config: SweepConfig, n_variants: int) -> int:
    """A generous estimate of what the sweep writes (x2 for temp files and margins)."""
    load = config.load
    per_variant = sum(
        load.num_requests(c) * load.max_passes(c) * _BYTES_PER_REQUEST + _BYTES_PER_LEVEL
        for c in load.concurrency
    )
    return 2 * n_variants * len(load.shape_list()) * per_variant + 16 * 1024 * 1024


def check_results_dir(config: SweepConfig, n_variants: int) -> None:
    """The results root exists (or can be made), takes a real write, and has room.

    A root on another filesystem (s3://, gs://, hdfs://, ...) takes a real probe write and
    delete through that filesystem; its free space is not checked (object stores have no
    such thing, and pyarrow reports none for any filesystem).
    """
    root = local_path(config.results_dir)
    if root is None:
        _probe_remote(str(config.results_dir))
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".specsweep-probe.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"\0" * _PROBE_BYTES)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            Path(probe).unlink(missing_ok=True)
    except OSError as exc:
        why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise ConfigError(
            f"results_dir {root} is not writable ({why}); nothing was launched. "
            "Free space or point results_dir elsewhere"
        ) from None
    need = results_bytes_needed(config, n_variants)
    free = shutil.disk_usage(root).free
    if free < need:
        raise ConfigError(
            f"results_dir {root} has {free / 2**20:.0f} MiB free, the sweep may write "
            f"~{need / 2**20:.0f} MiB; nothing was launched. Free space or point "
            "results_dir elsewhere"
        )


def _probe_remote(uri: str) -> None:
    """Write and delete a small object under the root, the way the store writes."""
    location = ResultsRoot(uri)
    rel = f".specsweep-probe.{secrets.token_hex(6)}.tmp"
    try:
        location.write(rel, b"\0" * _REMOTE_PROBE_BYTES)
    except (OSError, ValueError) as exc:  # pyarrow: OSError for I/O, ValueError for a bad URI
        raise ConfigError(
            f"results_dir {uri} is not writable ({exc}); nothing was launched. Check the "
            "URI and the credentials in this host's environment, or point results_dir "
            "elsewhere"
        ) from None
    try:
        location.delete(rel)
    except OSError as exc:  # specsweep never deletes results: a store may forbid it
        log.warning("results_dir %s: could not delete the probe %s (%s)", uri, rel, exc)
    log.info("results_dir %s takes writes; free space not checked on this filesystem", uri)
