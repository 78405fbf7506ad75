"""A real OpenSSH server on 127.0.0.1 for the SSH target tests, with its own keys.

Key-only auth, a known_hosts file holding its host key, and sftp: what a
GPU host reached over SSH offers. Needs /usr/sbin/sshd (`.ci/run` installs
openssh-server); tests skip with the install command where it is missing,
and fail instead where it is required (CI; tests/needs.py).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.conftest import free_port as _free_port

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def target(self, workdir: Path, **overrides: object) -> dict[str, object]:
        """An SshTarget section reaching this server, as a config file would give it."""
        import sys

        data: dict[str, object] = {
            "kind": "ssh",
            "name": "ssh-test",
            "host": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "key_file": str(self.key_file),
            "known_hosts": str(self.known_hosts),
            "python": sys.executable,
            "workdir": str(workdir),
            "connect_timeout_s": 5,
            "connect_attempts": 2,
        }
        data.update(overrides)
        return data

    def drop_connections(self, client_port: int) -> list[int]:
        """Kill the sshd processes serving one client connection: the link drops as in a
        network failure, while sshd keeps accepting new connections."""
        pids = set()
        for conn in psutil.net_connections(kind="tcp"):
            if not (conn.laddr and conn.raddr and conn.pid) or conn.pid == self.proc.pid:
                continue
            if conn.laddr.port == self.port and conn.raddr.port == client_port:
                pids.add(conn.pid)
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
        return sorted(pids)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def why_unavailable() -> str | None:
    if not Path(SSHD).exists():
        return f"{SSHD} missing: apt-get install openssh-server (CI installs it)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen missing: apt-get install openssh-client"
    return None


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def start_sshd(root: Path) -> Sshd:
    root.mkdir(parents=True, exist_ok=True)
    host_key, client_key = root / "host_key", root / "client_key"
    _keygen(host_key)
    _keygen(client_key)
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client_key.pub").read_text())
    authorized.chmod(0o600)
    port = _free_port()
    known = root / "known_hosts"
    host_pub = (root / "host_key.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {root / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",
                "MaxStartups 100",
                "MaxSessions 100",
                "Subsystem sftp internal-sftp",
                "LogLevel VERBOSE",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
    log = root / "sshd.log"
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return Sshd(port, getpass.getuser(), client_key, known, proc, log)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"sshd did not listen on {port}: {log.read_text()[-2000:]}")
