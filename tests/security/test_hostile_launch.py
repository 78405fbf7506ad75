"""Hostile values through a real launch, locally and over SSH (a real sshd on loopback).

The launched process's own argv and environment, read back from the kernel with
psutil, are exactly what was configured, and no injection fragment ever ran: the
canary file that any shell interpretation would create does not exist.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from specsweep.config.command import build_launch_command
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from tests.conftest import free_port, sim_config_data
from tests.integration.sim_server import variant_server
from tests.security.hostile import (
    CANARY,
    hostile_env_values,
    hostile_extra_args,
    hostile_path,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAUNCHES = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _config(root: Path, model_path: str, draft: str, extra: list[str], env: dict[str, str]):
    data = sim_config_data(root, free_port())
    data["server"].update(model_path=model_path, extra_args=extra)
    data["server"]["env"].update(env)
    data["step_sweep"]["draft_model_path"] = draft
    return data


def _proc_strings(pid: int, what: str) -> list[str]:
    """/proc/<pid>/cmdline or environ as the kernel holds them (psutil's text read would
    turn a carriage return into a newline).

    Popen returns once exec has passed its point of no return (the close-on-exec pipe
    closes), but the kernel sets the new image's argument and environment pages a moment
    later (load_elf_binary's create_elf_tables): read in that window, both are empty. A
    child descheduled there on a loaded machine gave an empty argv (CI, 2026-12-06), so
    the read waits for the new image; a process that died would stay empty: that fails."""
    path = Path(f"/proc/{pid}/{what}")
    deadline = time.monotonic() + 10.0
    raw = path.read_bytes()
    while not raw and time.monotonic() < deadline:
        time.sleep(0.001)
        raw = path.read_bytes()
    return [os.fsdecode(part) for part in raw.split(b"\0")[:-1]]


def _launch_and_read(data: dict[str, Any]) -> None:
    """Launch the step sweep's speculative variant, compare what the kernel says ran."""
    config = parse_config(data)
    variant = sweep_variants(config, "step-sweep")[1]
    remote_python = getattr(config.target, "python", None)
    expected = build_launch_command(config.server, variant, default_python=remote_python)
    server = variant_server(config, variant, f"hostile-{uuid.uuid4().hex[:8]}")
    server.kill_stale()
    handle = server.launch()
    try:
        # Popen returns after exec, so this is the server's argv, not a forked parent's.
        assert _proc_strings(handle.pid, "cmdline") == list(expected.argv)
        environ = dict(e.split("=", 1) for e in _proc_strings(handle.pid, "environ"))
        for name, value in expected.env.items():
            assert environ.get(name) == value, name
    finally:
        server.teardown()
    assert not CANARY.exists(), "a shell interpreted a configured value"


@LAUNCHES
@given(
    model_path=hostile_path(),
    draft=hostile_path(),
    extra=hostile_extra_args(),
    env=hostile_env_values(),
)
def test_local_launch_runs_exactly_the_configured_argv(
    tmp_path: Path, model_path, draft, extra, env
) -> None:
    _launch_and_read(_config(tmp_path, model_path, draft, extra, env))


@settings(LAUNCHES, max_examples=3)
@given(
    model_path=hostile_path(),
    draft=hostile_path(),
    extra=hostile_extra_args(),
    env=hostile_env_values(),
)
def test_ssh_launch_runs_exactly_the_configured_argv(
    tmp_path: Path, sshd, model_path, draft, extra, env
) -> None:
    data = _config(tmp_path, model_path, draft, extra, env)
    data["target"] = sshd.target(tmp_path / "remote")
    _launch_and_read(data)
