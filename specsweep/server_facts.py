"""Ask a ready server and its host what they are, for the results' identity columns."""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass

import requests

from specsweep.config import ServerSpec


@dataclass(frozen=True)
class ServerFacts:
    """What the running server (or the host) says about itself."""

    sglang_version: str | None = None
    simulated: bool = False
    gpu_name: str | None = None
    gpu_count: int | None = None
    driver_version: str | None = None
    gpu_host: str | None = None  # the machine the server runs on (an SSH target's name)


def _server_info(base_url: str, timeout_s: float = 10.0) -> dict:
    with requests.Session() as session:
        session.trust_env = False  # a proxy must never answer for the server
        for path in ("/server_info", "/get_server_info"):  # newer, then older sglang
            try:
                resp = session.get(f"{base_url}{path}", timeout=timeout_s)
            except requests.RequestException:
                continue
            if resp.status_code == 200:
                try:
                    return resp.json()
                except ValueError:
                    continue
    return {}


def local_gpus() -> tuple[str | None, int | None, str | None]:
    """GPU name, count and driver version from nvidia-smi; Nones on a host without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None, None, None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None, None, None
    rows = [[c.strip() for c in ln.split(",")] for ln in out.splitlines() if ln.strip()]
    if not rows:
        return None, None, None
    driver = rows[0][1] if len(rows[0]) > 1 else None
    return rows[0][0], len(rows), driver


def server_facts(server: ServerSpec, base_url: str | None = None) -> ServerFacts:
    """Run on the GPU host: nvidia-smi there names the GPUs the server uses."""
    info = _server_info(base_url or server.base_url)
    simulated = bool(info.get("simulated")) or server.backend == "simulator"
    version = info.get("version")
    host = socket.gethostname()
    if simulated:
        return ServerFacts(version, True, "simulated", server.tp, None, host)
    name, count, driver = local_gpus()
    return ServerFacts(version, False, name, count, driver, host)
