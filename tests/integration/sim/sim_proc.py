"""Start the simulator as a real process on loopback, for the sim integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.conftest import free_port  # noqa: F401 - re-exported for the sim tests

FAST = {
    "SPECSWEEP_SIM_TIME_SCALE": "0.05",
    "SPECSWEEP_SIM_LOAD_SECONDS": "0.2",
    "SPECSWEEP_SIM_WARMUP_SECONDS": "0.2",
    "SPECSWEEP_SIM_HEALTH_SECONDS": "0.01",
}


def sim_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECSWEEP_SIM_", "SGLANG_"))}
    return {**env, **FAST, **extra}


def spawn(port: int, *flags: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "specsweep.sim.launch_server", "--model-path", "sim/llama"]
    with log.open("wb") as out:
        return subprocess.Popen(
            [*argv, "--port", str(port), *flags],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=sim_env(**env),
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


@contextmanager
def running(port: int, *flags: str, log: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn(port, *flags, log=log, **env)
    try:
        yield proc
    finally:
        stop(proc)


def probe(url: str) -> str:
    try:
        return str(requests.get(url + "/health", timeout=2).status_code)
    except requests.ConnectionError:
        return "refused"


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "simulator died during startup"
        state = probe(url)
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == "200":
            return seen
        time.sleep(0.05)
    raise AssertionError(f"not ready after {timeout}s: {seen}")


def sse_chunks(resp: requests.Response) -> list[dict | str]:
    out: list[dict | str] = []
    for line in resp.iter_lines():
        if line.startswith(b"data: "):
            payload = line[6:].decode()
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
