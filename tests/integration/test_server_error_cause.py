"""A failed launch's error names the phase and the cause (project issue 14, defect 4).

The real simulator process, started with its crash and hang knobs, against the real
health wait (`specsweep.targets.health.wait_until_ready`) over loopback HTTP. The
server is started here with subprocess, in its own session, and its whole process
group is SIGKILLed afterwards, so nothing of the launch pipeline is involved.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specsweep.errors import ServerDiedError, ServerStartTimeout
from specsweep.targets.health import wait_until_ready
from tests.conftest import FAST_SIM_ENV

pytestmark = pytest.mark.integration

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB."


def read_tail(path: Path, n: int) -> list[str]:
    text = path.read_text(errors="replace").replace("\r", "\n") if path.exists() else ""
    return [line for line in text.splitlines() if line.strip()][-n:]


@contextlib.contextmanager
def simulator(
    tmp_path: Path, port: int, env: dict[str, str], *flags: str
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    argv = [sys.executable, "-m", "specsweep.sim.launch_server", "--model-path", "sim/llama",
            "--host", "127.0.0.1", "--port", str(port), *flags]  # fmt: skip
    log = tmp_path / "server.log"
    log.write_text(f"# specsweep launch: {' '.join(argv)}\n")  # as targets/local.py writes
    full_env = {**os.environ, **FAST_SIM_ENV, **env}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
    try:
        yield proc, log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def wait(proc: subprocess.Popen[bytes], log: Path, port: int, timeout_s: float = 30) -> None:
    wait_until_ready(
        f"http://127.0.0.1:{port}",
        is_alive=lambda: proc.poll() is None,
        tail_log=lambda n: read_tail(log, n),
        timeout_s=timeout_s,
    )


# (knobs, sglang flags, phase named, cause the first line must carry)
# The load phase lasts LOAD_SECONDS=3 s: "Load weight begin" at 0.17 s, "Capture cuda
# graph begin" at 2.0 s (specsweep/sim/launch_server.py `_load_steps`).
# fmt: off
CRASHES = {
    "oom-loading-weights": (
        {"SPECSWEEP_SIM_CRASH": "load", "SPECSWEEP_SIM_CRASH_AFTER_S": "1.0",
         "SPECSWEEP_SIM_LOAD_SECONDS": "3"},
        (), "while loading weights", OOM,
    ),
    "oom-capturing-cuda-graphs": (
        {"SPECSWEEP_SIM_CRASH": "load", "SPECSWEEP_SIM_CRASH_AFTER_S": "2.5",
         "SPECSWEEP_SIM_LOAD_SECONDS": "3"},
        (), "while capturing CUDA graphs", OOM,
    ),
    "cuda-error-warming-up": (
        {"SPECSWEEP_SIM_CRASH": "warmup", "SPECSWEEP_SIM_CRASH_AFTER_S": "1.0",
         "SPECSWEEP_SIM_WARMUP_SECONDS": "3"},
        (), "while warming up",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ),
    "bad-flag-bare-assertion": (
        {},
        ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft",
         "--speculative-eagle-topk", "2"),
        "while starting", "AssertionError at specsweep/sim/server_args.py:",
    ),
    "port-taken": (
        {"SPECSWEEP_SIM_PORT_IN_USE": "1"},
        (), "while starting the HTTP server",
        "[Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
        "address already in use",
    ),
}
# fmt: on


@pytest.mark.parametrize("name", list(CRASHES))
def test_a_died_error_names_the_phase_and_the_cause(tmp_path, port, name):
    env, flags, phase, cause = CRASHES[name]
    with (
        simulator(tmp_path, port, env, *flags) as (proc, log),
        pytest.raises(ServerDiedError) as info,
    ):
        wait(proc, log, port)
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"server process exited {phase} after "), first
    assert f"s: {cause.format(port=port)}" in first, first
    assert "Traceback" not in first and "sigquit" not in first.lower()
    assert info.value.log_tail and "last log lines:" in str(info.value)  # the tail stays
    assert info.value.transient == (name == "port-taken")


def test_a_timeout_names_the_phase_and_the_last_line(tmp_path, port):
    env = {"SPECSWEEP_SIM_HANG": "load", "SPECSWEEP_SIM_LOAD_SECONDS": "1"}
    with simulator(tmp_path, port, env) as (proc, log), pytest.raises(ServerStartTimeout) as info:
        deadline = time.monotonic() + 60  # a loaded machine can take long to start Python
        while "Load weight begin" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        wait(proc, log, port, timeout_s=1)
    first = str(info.value).splitlines()[0]
    assert first.startswith("server not ready after 1s (last state: refused) "), first
    assert "while loading weights: no error in the log; last line: Load weight begin." in first
