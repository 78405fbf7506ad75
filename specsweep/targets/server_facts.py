"""Ask a ready server and its host what they are, for the results' identity columns."""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass

import requests

from specsweep.config import ServerSpec
from specsweep.targets.gpus import gpus_from_env


@dataclass(frozen=True)
class ServerFacts:
    """What the running server (or the host) says about itself."""

    sglang_version: str | None = None
    simulated: bool = False
    gpu_name: str | None = None
    gpu_count: int | None = None
    driver_version: str | None = None
    gpu_host: str | None = None  # the machine the server runs on (an SSH target's name)
    gpu_uuids: str | None = None  # the server's GPUs, comma-separated: which cards measured


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


def local_gpus(
    visible: list[int] | None = None,
) -> tuple[str | None, int | None, str | None, str | None]:
    """GPU name, count, driver version and uuids from nvidia-smi, for the GPUs a server
    may use (`visible` indices; None: all); Nones on a host without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None, None, None, None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,name,driver_version,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None, None, None, None
    rows = [[c.strip() for c in ln.split(",")] for ln in out.splitlines() if ln.strip()]
    rows = [r for r in rows if len(r) == 4 and (visible is None or _index(r[0]) in visible)]
    if not rows:
        return None, None, None, None
    return rows[0][1], len(rows), rows[0][2], ",".join(r[3] for r in rows)


def _index(cell: str) -> int | None:
    return int(cell) if cell.isdigit() else None


def server_facts(server: ServerSpec, base_url: str | None = None) -> ServerFacts:
    """Run on the GPU host: nvidia-smi there names the GPUs the server uses."""
    info = _server_info(base_url or server.base_url)
    simulated = bool(info.get("simulated")) or server.backend == "simulator"
    version = info.get("version")
    host = socket.gethostname()
    if simulated:
        return ServerFacts(version, True, "simulated", server.tp, None, host)
    name, count, driver, uuids = local_gpus(gpus_from_env(server.env))
    return ServerFacts(version, False, name, count, driver, host, uuids)
