"""benchmarks/stub_server.py for tests: in the test's own loop, or as a subprocess."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

STUB_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "stub_server.py"


@cache
def stub_module() -> ModuleType:
    """The stub as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("specsweep_stub_server", STUB_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def fast_stub(**config: Any) -> AsyncIterator[str]:
    """The fast stub on the running loop; yields its base URL."""
    stub = stub_module()
    server = await stub.start_server(stub.StubConfig(**config))
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


@contextmanager
def stub_process(*args: str) -> Iterator[str]:
    """The stub's CLI in its own process group; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(STUB_PATH), "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield line.split()[-1]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
