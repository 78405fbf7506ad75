"""Ask a ready server and its host what they are, for the results' identity columns."""

from __future__ import annotations

import shutil
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


def local_gpus() -> tuple[str | None, int | None]:
    """GPU name and count from nvidia-smi, or (None, None) on a host without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None, None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None, None
    names = [n.strip() for n in out.splitlines() if n.strip()]
    return (names[0], len(names)) if names else (None, None)


def server_facts(server: ServerSpec, base_url: str | None = None) -> ServerFacts:
    """Run on the GPU host: nvidia-smi there names the GPUs the server uses."""
    info = _server_info(base_url or server.base_url)
    simulated = bool(info.get("simulated")) or server.backend == "simulator"
    version = info.get("version")
    if simulated:
        return ServerFacts(version, True, "simulated", server.tp)
    name, count = local_gpus()
    return ServerFacts(version, False, name, count)
