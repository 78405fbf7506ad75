"""A real PostgreSQL cluster on 127.0.0.1 from Debian's packages, for a Prefect server.

`postgres_cluster(root)` runs Debian's `initdb` and `postgres` (the highest version under
/usr/lib/postgresql/*/bin; `.ci/run` installs the `postgresql` package), creates a role and
a database `prefect`, and yields the cluster once it accepts connections. On exit it stops
the server (`pg_ctl stop -m fast`, then `-m immediate`, then SIGKILL to each of its processes)
and removes its files: no postgres process outlives the block, whatever happened inside it.

How it is set up:
- TCP only on 127.0.0.1, on a free port; the role `prefect` logs in there with a random
  password (scram-sha-256), which is what the yielded URL carries. The unix socket lives in
  the cluster's own directory (mode 0700) and trusts only its owner: the bootstrap
  superuser creates the role and database through it, and nothing else uses it.
- PostgreSQL refuses to run as root. Then initdb and postgres run as the `postgres` system
  user (or `nobody` where there is none), and the data directory lives in a fresh
  directory under the system temp dir that this user owns, because pytest's temp dirs
  (0700, root's) are closed to it. The server's log is under `root` either way.
- fsync, synchronous_commit and full_page_writes are off: a test cluster trades
  durability across a machine crash for speed; a server restart keeps every commit.

No pytest at import: benchmarks/ uses this module too (`find_bin_dir` tells whether the
binaries exist; only `postgres_cluster` calls tests.needs where they do not).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import free_port as _free_port

DEBIAN_BINS = "/usr/lib/postgresql/*/bin"
MISSING = "PostgreSQL server binaries not found: apt-get install postgresql"
DB = "prefect"  # the role and the database
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",  # a Prefect server's pool per process, several processes
}


def find_bin_dir() -> Path | None:
    """The bin dir of the highest PostgreSQL version Debian's packages installed."""

    def version(path: Path) -> tuple[int, ...]:
        parts = path.parent.name.split(".")
        return tuple(int(p) for p in parts if p.isdigit())

    candidates = [p for p in Path("/").glob(DEBIAN_BINS.lstrip("/")) if (p / "initdb").exists()]
    return max(candidates, key=version) if candidates else None


@dataclass
class PgCluster:
    url: str  # postgresql+asyncpg://prefect:PASSWORD@127.0.0.1:PORT/prefect
    port: int
    data_dir: Path
    log: Path
    bin_dir: Path
    password: str = field(repr=False)
    user: str = DB
    database: str = DB

    def sql(self, query: str, timeout: float = 30) -> str:
        """Run `query` with psql over TCP as the `prefect` role; its unaligned rows
        (`|` between columns, one row a line), stripped. Raises on any SQL error."""
        proc = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", self.database,
             "-c", query],
            env={**_clean_env(), "PGPASSWORD": self.password, "PGCONNECT_TIMEOUT": "5"},
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"psql failed ({proc.returncode}) on {query!r}: {proc.stderr}")
        return proc.stdout.strip()


def _clean_env() -> dict[str, str]:
    """This environment without libpq's PG* variables (a developer's PGHOST must not
    redirect a test's psql)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _server_user() -> pwd.struct_passwd | None:
    """Who runs initdb and postgres: None for ourselves, or a system user when we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and neither a `postgres` nor a `nobody` user exists")


def _as(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """subprocess keyword arguments that run a command as `user`."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _run(argv: list[str], user: pwd.struct_passwd | None, cwd: Path, **env: str) -> str:
    proc = subprocess.run(
        argv, cwd=cwd, env={**_clean_env(), **env}, capture_output=True, text=True,
        timeout=120, **_as(user),
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


@contextlib.contextmanager
def postgres_cluster(root: Path) -> Iterator[PgCluster]:
    """A fresh PostgreSQL cluster on 127.0.0.1 with a role and database `prefect`; stopped
    and removed on exit. Skips (or fails under SPECSWEEP_REQUIRE_ALL) without the binaries."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        from tests.needs import missing

        missing("POSTGRES", MISSING)
    root.mkdir(parents=True, exist_ok=True)
    user = _server_user()
    # Short paths (a unix socket path has ~100 bytes) that the server's user owns.
    home = Path(tempfile.mkdtemp(prefix="specsweep-pg-"))
    data_dir, sock_dir = home / "data", home / "socket"
    sock_dir.mkdir(mode=0o700)
    if user is not None:
        for path in (home, sock_dir):
            os.chown(path, user.pw_uid, user.pw_gid)
    log = root / "postgres.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        _run(
            [str(bin_dir / "initdb"), "-D", str(data_dir), "-U", "postgres", "-E", "UTF8",
             "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"],
            user, home,
        )  # fmt: skip
        data_dir.chmod(0o700)  # initdb makes it so; postgres refuses to start otherwise
        port = _free_port()
        settings = {**SETTINGS, "port": str(port), "unix_socket_directories": str(sock_dir)}
        argv = [str(bin_dir / "postgres"), "-D", str(data_dir)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv, cwd=home, env=_clean_env(), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, **_as(user),
            )  # fmt: skip
        _wait_ready(bin_dir, sock_dir, port, proc, log, user, home)
        password = secrets.token_urlsafe(18)  # URL-safe: goes into the URL as is
        _run(
            [str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(sock_dir),
             "-p", str(port), "-U", "postgres", "-d", "postgres",
             "-c", f"CREATE ROLE {DB} LOGIN PASSWORD '{password}'",
             "-c", f"CREATE DATABASE {DB} OWNER {DB}"],
            user, home,
        )  # fmt: skip
        url = f"postgresql+asyncpg://{DB}:{password}@127.0.0.1:{port}/{DB}"
        yield PgCluster(url, port, data_dir, log, bin_dir, password)
    finally:
        if proc is not None:
            _stop(bin_dir, data_dir, proc, user, home)
        shutil.rmtree(home, ignore_errors=True)


def _wait_ready(
    bin_dir: Path,
    sock_dir: Path,
    port: int,
    proc: subprocess.Popen[bytes],
    log: Path,
    user: pwd.struct_passwd | None,
    cwd: Path,
    timeout: float = 60,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        ready = subprocess.run(
            [str(bin_dir / "pg_isready"), "-q", "-h", str(sock_dir), "-p", str(port)],
            cwd=cwd, env=_clean_env(), timeout=10, **_as(user),
        )  # fmt: skip
        if ready.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"postgres not ready after {timeout}s:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def _stop(
    bin_dir: Path,
    data_dir: Path,
    proc: subprocess.Popen[bytes],
    user: pwd.struct_passwd | None,
    cwd: Path,
) -> None:
    """Fast shutdown (disconnect clients, checkpoint), then immediate, then SIGKILL to the
    postmaster and each of its processes (every backend calls setsid(): they are not in
    the postmaster's process group)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for mode in ("fast", "immediate"):
        if proc.poll() is not None:
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                [str(bin_dir / "pg_ctl"), "stop", "-D", str(data_dir), "-m", mode, "-w",
                 "-t", "15"],
                cwd=cwd, env=_clean_env(), capture_output=True, timeout=20, **_as(user),
            )  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for child in children:  # gone already unless the postmaster had to be killed
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=5)
