"""Start the simulator as a real process on loopback, for the sim integration tests.

Every server gets its own simulated GPU inventory (next to its log), and ``stop``
kills the whole tree, orphaned schedulers included, so no test leaks a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import requests

from tests.conftest import free_port  # noqa: F401 - re-exported for the sim tests

FAST = {
    "SPECSWEEP_SIM_TIME_SCALE": "0.05",
    "SPECSWEEP_SIM_LOAD_SECONDS": "0.2",
    "SPECSWEEP_SIM_WARMUP_SECONDS": "0.2",
    "SPECSWEEP_SIM_HEALTH_SECONDS": "0.01",
}
_TREES: dict[int, set[int]] = {}  # launcher pid -> every descendant pid seen


def sim_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECSWEEP_SIM_", "SGLANG_"))}
    return {**env, **FAST, **extra}


def spawn(port: int, *flags: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    env.setdefault("SPECSWEEP_SIM_GPU_STATE", str(log.parent / "gpus"))
    argv = [sys.executable, "-m", "specsweep.sim.launch_server", "--model-path", "sim/llama"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port), *flags],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=sim_env(**env),
            start_new_session=True,
        )
    _TREES[proc.pid] = set()
    return proc


def children(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The launcher's live children (remembered, so ``stop`` can find orphans)."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    _TREES.setdefault(proc.pid, set()).update(k.pid for k in kids)
    return kids


def wait_children(
    proc: subprocess.Popen[bytes], n: int, timeout: float = 10.0
) -> list[psutil.Process]:
    """Wait for ``n`` children that have taken their ``sglang::`` titles."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = children(proc)
        with contextlib.suppress(psutil.NoSuchProcess):
            if len(kids) >= n and all(k.name().startswith("sglang::") for k in kids):
                return kids
        time.sleep(0.02)
    raise AssertionError(f"expected {n} children, have {[k.name() for k in children(proc)]}")


def is_gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the launcher's group, then any remembered descendant (orphans)."""
    children(proc)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
    for pid in _TREES.pop(proc.pid, set()):
        if not is_gone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextmanager
def running(port: int, *flags: str, log: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn(port, *flags, log=log, **env)
    try:
        yield proc
    finally:
        stop(proc)


def probe(url: str, path: str = "/health") -> str:
    try:
        return str(requests.get(url + path, timeout=2).status_code)
    except requests.ConnectionError:
        return "refused"


def wait_ready(
    url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0, path: str = "/health"
) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "simulator died during startup"
        state = probe(url, path)
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
