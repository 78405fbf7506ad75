"""The load generator's open files: a socket per stream must fit the process's limit."""

from __future__ import annotations

import resource

from specsweep.errors import ConfigError

# Files beyond one socket per stream: the server's admin calls, logs, Python's own.
SPARE_FILES = 256


def files_for(concurrency: int) -> int:
    return concurrency + SPARE_FILES


def ensure_open_files(needed: int, *, apply: bool = True) -> str | None:
    """Raise this process's soft open-file limit to `needed` if the hard limit allows; say
    what was done (None: nothing needed). Refused when even the hard limit is too low.
    `apply` False: only say what a run would do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return None
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise ConfigError(
            f"the highest concurrency needs {needed} open files (a socket per stream), but "
            f"this machine allows {hard} (ulimit -Hn): lower load.concurrency, or raise the "
            "hard limit (limits.conf / systemd LimitNOFILE) and run again"
        )
    if not apply:
        return (
            f"the highest level needs {needed} open files (a socket per stream): a run here "
            f"raises the limit from {soft} to {needed} (the hard limit allows {hard})"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return f"raised the open-file limit from {soft} to {needed} for the highest level's streams"
