"""Every results path, atomic writes, and reads back into pandas.

Layout under the results root (readable without specsweep)::

    levels/<run_id>/<variant>__c<concurrency>.parquet   one row each
    runs/<run_id>.parquet                               one row each

A file is written to a temporary name and renamed, so a reader or a crash
never sees half a file, and "the file exists" is the resume test.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from specsweep.results.schema import LEVELS_SCHEMA, RUNS_SCHEMA

if TYPE_CHECKING:
    import pandas as pd


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by time, unique across hosts: 20261129T091500Z-1a2b3c."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _write_atomic(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _conform(row: dict[str, Any], schema: pa.Schema) -> pa.Table:
    unknown = set(row) - set(schema.names)
    if unknown:
        raise ValueError(
            f"columns not in the {schema.metadata[b'specsweep.table'].decode()} "
            f"schema: {sorted(unknown)}"
        )
    return pa.Table.from_pylist([{n: row.get(n) for n in schema.names}], schema=schema)


class ResultsStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @property
    def levels_dir(self) -> Path:
        return self.root / "levels"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def level_path(self, run_id: str, variant: str, concurrency: int) -> Path:
        return self.levels_dir / run_id / f"{variant}__c{concurrency:05d}.parquet"

    def run_path(self, run_id: str) -> Path:
        return self.runs_dir / f"{run_id}.parquet"

    def has_level(self, run_id: str, variant: str, concurrency: int) -> bool:
        return self.level_path(run_id, variant, concurrency).exists()

    def write_level(self, row: dict[str, Any]) -> Path:
        path = self.level_path(row["run_id"], row["variant"], row["concurrency"])
        return _write_atomic(_conform(row, LEVELS_SCHEMA), path)

    def write_run(self, row: dict[str, Any]) -> Path:
        return _write_atomic(_conform(row, RUNS_SCHEMA), self.run_path(row["run_id"]))

    def run_ids(self) -> list[str]:
        if not self.levels_dir.is_dir():
            return []
        return sorted(p.name for p in self.levels_dir.iterdir() if p.is_dir())

    def latest_run_id(self) -> str | None:
        ids = self.run_ids()
        return ids[-1] if ids else None

    def read_levels(self, run_id: str | None = None) -> pd.DataFrame:
        """All level rows (or one run's), one schema whatever the files' age."""
        base = self.levels_dir / run_id if run_id else self.levels_dir
        files = sorted(base.rglob("*.parquet")) if base.is_dir() else []
        if not files:
            return LEVELS_SCHEMA.empty_table().to_pandas()
        tables = [pq.read_table(f).cast(LEVELS_SCHEMA) for f in files]
        return pa.concat_tables(tables).to_pandas()

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        path = self.run_path(run_id)
        if not path.exists():
            return None
        return pq.read_table(path).to_pylist()[0]
