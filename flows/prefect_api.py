"""Prefect's ephemeral API made ready before it starts, so the first run works on a fresh machine.

Without PREFECT_API_URL, the first Prefect call of a process starts a temporary API server
in a subprocess and waits for its /health for PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS
(default 20, counting only its 0.1 s sleeps: prefect/server/api/server.py,
`SubprocessASGIServer.start`). The server's startup (`create_app`'s lifespan) first creates
and migrates its SQLite database, every alembic migration on a fresh PREFECT_HOME: on a busy
2-core machine that alone outlasts the wait, and the first `specsweep demo` died with "Timed
out while attempting to connect to ephemeral Prefect API server" (the second one worked).
`prepare_ephemeral_api` migrates the database in this process, with no timeout, before
anything starts the server; the server then finds it at head and starts in its usual time.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import prefect
from prefect.settings import (
    PREFECT_API_DATABASE_CONNECTION_URL,
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_SERVER_EPHEMERAL_ENABLED,
)

__all__ = ["MARKER", "database_file", "prepare_ephemeral_api", "uses_ephemeral_api"]

# Beside Prefect's own files: which Prefect version last migrated which database from here.
MARKER = "specsweep-database-ready"


def uses_ephemeral_api() -> bool:
    """Whether this process's Prefect calls start a temporary API server (no API URL set)."""
    return not PREFECT_API_URL.value() and bool(PREFECT_SERVER_EPHEMERAL_ENABLED.value())


def database_file(url: str) -> Path | None:
    """The SQLite file behind a database URL (`sqlite+aiosqlite:///<path>`); None for an
    in-memory or non-SQLite database. Parsed here: sqlalchemy's parser costs a second."""
    scheme, _, rest = url.partition("://")
    if not scheme.startswith("sqlite"):
        return None
    path = rest.removeprefix("/").partition("?")[0]
    return Path(path) if path not in ("", ":memory:") else None


def prepare_ephemeral_api() -> bool:
    """Create and migrate the ephemeral API's database now, unless it is known to be at this
    Prefect's head; True when it migrated. Nothing to do with a Prefect server (API URL).

    Known: the database file exists and this helper migrated it under the same Prefect
    version and database URL (a marker in PREFECT_HOME), so a usual run skips the migration
    check (seconds of imports) and a Prefect upgrade or a deleted database migrates again.
    Processes starting together take turns (a file lock): SQLite migrations must not race.
    """
    if not uses_ephemeral_api():
        return False
    url = str(PREFECT_API_DATABASE_CONNECTION_URL.value())
    if url.startswith("sqlite") and database_file(url) is None:
        return False  # in memory: each server process has its own, nothing to prepare here
    home = Path(PREFECT_HOME.value()).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    marker = home / MARKER
    # hashed: a PostgreSQL URL may hold a password
    key = hashlib.sha256(f"{prefect.__version__}\n{url}".encode()).hexdigest()
    with _locked(home / f"{MARKER}.lock"):
        if _ready(marker, key, url):
            return False
        asyncio.run(_migrate())
        marker.write_text(key)
    return True


def _ready(marker: Path, key: str, url: str) -> bool:
    path = database_file(url)
    if path is not None and not path.is_file():
        return False
    try:
        return marker.read_text() == key
    except OSError:
        return False


async def _migrate() -> None:
    """What the server's startup does first (`db.create_db()`: alembic upgrade to head)."""
    from prefect.server.database import provide_database_interface

    db = provide_database_interface()
    await db.create_db()
    await (await db.engine()).dispose()  # this process never uses the database again


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
