"""Every results path, atomic writes, and reads back into pandas.

Layout under the results root (readable without specsweep)::

    levels/<run_id>/<variant>__c<concurrency>@<target>.parquet     one row
    requests/<run_id>/<variant>__c<concurrency>@<target>.parquet   one row per request
    runs/<run_id>.parquet                                          one row
    phases/<run_id>/<variant>@<target>.json                        phase timings

The target (host) is part of every measurement's name: in a fleet the same
variant and level can be measured on two hosts (a re-run after a host was
lost), and neither may overwrite the other. Files written before targets were
part of the name (``<variant>__c<concurrency>.parquet``) still read and still
count as measured.

A file is written to a temporary name and renamed, so a reader or a crash
never sees half a file, and "the file exists" is the resume test.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from specsweep.results.schema import LEVELS_SCHEMA, REQUESTS_SCHEMA, RUNS_SCHEMA

if TYPE_CHECKING:
    import pandas as pd


def target_slug(target: str) -> str:
    """A target name as a file-name part (names are labels; paths need a safe subset)."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", target).strip("-") or "unnamed"


def _level_stem(variant: str, concurrency: int) -> str:
    return f"{variant}__c{concurrency:05d}"


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
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from a team's readers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _conform(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    unknown = set().union(*rows) - set(schema.names) if rows else set()
    if unknown:
        raise ValueError(
            f"columns not in the {schema.metadata[b'specsweep.table'].decode()} "
            f"schema: {sorted(unknown)}"
        )
    return pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema)


def _to_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A file written before a column existed reads with that column null."""
    columns = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, names=schema.names).cast(schema)


def _read(root: Path, run_id: str | None, schema: pa.Schema) -> pd.DataFrame:
    base = root / run_id if run_id else root
    files = sorted(base.rglob("*.parquet")) if base.is_dir() else []
    if not files:
        return schema.empty_table().to_pandas()
    return pa.concat_tables([_to_schema(pq.read_table(f), schema) for f in files]).to_pandas()


class ResultsStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @property
    def levels_dir(self) -> Path:
        return self.root / "levels"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def requests_dir(self) -> Path:
        return self.root / "requests"

    def level_path(self, run_id: str, variant: str, concurrency: int, target: str) -> Path:
        name = f"{_level_stem(variant, concurrency)}@{target_slug(target)}.parquet"
        return self.levels_dir / run_id / name

    def requests_path(self, run_id: str, variant: str, concurrency: int, target: str) -> Path:
        name = f"{_level_stem(variant, concurrency)}@{target_slug(target)}.parquet"
        return self.requests_dir / run_id / name

    def run_path(self, run_id: str) -> Path:
        return self.runs_dir / f"{run_id}.parquet"

    def has_level(
        self, run_id: str, variant: str, concurrency: int, target: str | None = None
    ) -> bool:
        """Measured on `target` (None: on any target) in this run.

        A file from before targets were in the name counts for every target.
        """
        stem = _level_stem(variant, concurrency)
        if (self.levels_dir / run_id / f"{stem}.parquet").exists():
            return True
        if target is not None:
            return self.level_path(run_id, variant, concurrency, target).exists()
        folder = self.levels_dir / run_id
        return folder.is_dir() and any(p.name.startswith(f"{stem}@") for p in folder.iterdir())

    def write_level(self, row: dict[str, Any]) -> Path:
        path = self.level_path(row["run_id"], row["variant"], row["concurrency"], row["target"])
        return _write_atomic(_conform([row], LEVELS_SCHEMA), path)

    def write_requests(
        self, run_id: str, variant: str, concurrency: int, target: str, rows: list[dict[str, Any]]
    ) -> Path:
        path = self.requests_path(run_id, variant, concurrency, target)
        return _write_atomic(_conform(rows, REQUESTS_SCHEMA), path)

    def write_run(self, row: dict[str, Any]) -> Path:
        return _write_atomic(_conform([row], RUNS_SCHEMA), self.run_path(row["run_id"]))

    def phases_path(self, run_id: str, variant: str, target: str) -> Path:
        return self.root / "phases" / run_id / f"{variant}@{target_slug(target)}.json"

    def write_phases(
        self, run_id: str, variant: str, target: str, phases: dict[str, float]
    ) -> Path:
        """A variant's phase timings on one target, beside the run so a crash cannot lose
        them; `held_from_unix`/`held_until_unix` bound the server's life on that target."""
        path = self.phases_path(run_id, variant, target)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{variant}.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(phases, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return path

    def read_phase_files(self, run_id: str) -> list[tuple[str, str | None, dict[str, float]]]:
        """(variant, target, phases) per sidecar; target None for files from before
        targets were in the name."""
        folder = self.root / "phases" / run_id
        if not folder.is_dir():
            return []
        out = []
        for p in sorted(folder.glob("*.json")):
            variant, _, target = p.stem.partition("@")
            out.append((variant, target or None, json.loads(p.read_text())))
        return out

    def read_phases(self, run_id: str) -> dict[str, dict[str, float]]:
        """variant -> phases; `variant@target` where a variant ran on several targets."""
        files = self.read_phase_files(run_id)
        count: dict[str, int] = {}
        for variant, _, _ in files:
            count[variant] = count.get(variant, 0) + 1
        return {(v if count[v] == 1 or t is None else f"{v}@{t}"): phases for v, t, phases in files}

    def run_ids(self) -> list[str]:
        if not self.levels_dir.is_dir():
            return []
        return sorted(p.name for p in self.levels_dir.iterdir() if p.is_dir())

    def latest_run_id(self) -> str | None:
        ids = self.run_ids()
        return ids[-1] if ids else None

    def read_levels(self, run_id: str | None = None) -> pd.DataFrame:
        """All level rows (or one run's), one schema whatever the files' age."""
        return _read(self.levels_dir, run_id, LEVELS_SCHEMA)

    def read_requests(self, run_id: str | None = None) -> pd.DataFrame:
        return _read(self.requests_dir, run_id, REQUESTS_SCHEMA)

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        path = self.run_path(run_id)
        if not path.exists():
            return None
        return pq.read_table(path).to_pylist()[0]
