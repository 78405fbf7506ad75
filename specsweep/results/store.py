"""Every results path, atomic writes, and reads back into pandas.

Layout under the results root (readable without specsweep)::

    levels/<run_id>/<variant>__c<concurrency>@<target>.parquet     one row
    requests/<run_id>/<variant>__c<concurrency>@<target>.parquet   one row per request

A run with several load shapes names each cell's files ``<variant>__<shape>__c<concurrency>``
(``eagle3-s3__in4096-out256__c00016@local.parquet``); a single-shape run keeps the names
above, so runs written before shapes existed resume as they are.
    runs/<run_id>.parquet                                          one row
    phases/<run_id>/<variant>@<target>.json                        phase timings
    drift/<run_id>/<target>.json                                   the target's drift calibration
    predictions/<run_id>/<stage>[-<variant>]@<target>.parquet      a search's predictions

The target (host) is part of every measurement's name: in a fleet the same
variant and level can be measured on two hosts (a re-run after a host was
lost), and neither may overwrite the other. Files written before targets were
part of the name (``<variant>__c<concurrency>.parquet``) still read and still
count as measured.

The root is a local path or any pyarrow filesystem URI (``s3://bucket/prefix``,
``file:///abs/path``, ...; see `specsweep.results.location`). On a local root a file is
written to a temporary name and renamed; on an object store it is uploaded in one piece
and appears when the upload completes. Either way a reader or a crash never sees half a
file, and "the file exists" is the resume test.

Paths handed out (`level_path`, `levels_dir`, ...) are `Path`s for a local root
(``file://`` URIs included) and ``scheme://bucket/prefix/...`` strings for any other.
"""

from __future__ import annotations

import json
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from specsweep.config.load import shape_label
from specsweep.results.location import ResultsRoot
from specsweep.results.schema import (
    HOSTS_SCHEMA,
    LEVELS_SCHEMA,
    PREDICTIONS_SCHEMA,
    REQUESTS_SCHEMA,
    RUNS_SCHEMA,
)

if TYPE_CHECKING:
    import pandas as pd
    from pyarrow.fs import FileSystem


_READERS = 16  # files read at once


def target_slug(target: str) -> str:
    """A target name as a file-name part (names are labels; paths need a safe subset)."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", target).strip("-") or "unnamed"


def _level_stem(variant: str, concurrency: int, shape: str | None = None) -> str:
    cell = f"{shape}__c{concurrency:05d}" if shape else f"c{concurrency:05d}"
    return f"{variant}__{cell}"


def _level_rel(
    table: str, run_id: str, variant: str, concurrency: int, target: str, shape: str | None = None
) -> str:
    stem = _level_stem(variant, concurrency, shape)
    return f"{table}/{run_id}/{stem}@{target_slug(target)}.parquet"


def fill_shape(levels: pd.DataFrame) -> pd.DataFrame:
    """Rows from before shapes existed (schema < 5) get their own in<input>-out<output>."""
    if levels.empty or not levels["shape"].isna().any():
        return levels
    missing = levels["shape"].isna()
    old = levels.loc[missing, ["input_len", "output_len"]]
    levels = levels.copy()
    levels.loc[missing, "shape"] = [shape_label(i, o) for i, o in old.itertuples(index=False)]
    return levels


def _phases_rel(run_id: str, variant: str, target: str) -> str:
    return f"phases/{run_id}/{variant}@{target_slug(target)}.json"


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by time, unique across hosts: 20261129T091500Z-1a2b3c."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


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
    if table.schema.equals(schema, check_metadata=False):  # written by this version
        return pa.Table.from_arrays(table.columns, schema=schema)
    columns = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, names=schema.names).cast(schema)


def _read(
    root: ResultsRoot, rel: str, schema: pa.Schema, columns: list[str] | None = None
) -> pd.DataFrame:
    """`columns`: read only these (a request row's chunk timings are most of its bytes)."""
    fs = root.filesystem
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
    files = root.files(rel, ".parquet")
    if not files:
        return schema.empty_table().to_pandas()

    def one(path: str) -> pa.Table:
        if columns is None:
            return _to_schema(pq.read_table(path, filesystem=fs), schema)
        present = pq.read_schema(path, filesystem=fs).names
        table = pq.read_table(path, filesystem=fs, columns=[c for c in columns if c in present])
        return _to_schema(table, schema)

    # Files are small and many; on an object store each read is a round trip.
    with ThreadPoolExecutor(max_workers=min(_READERS, len(files))) as pool:
        tables = list(pool.map(one, files))
    return pa.concat_tables(tables).to_pandas()


class ResultsStore:
    def __init__(self, root: Path | str, *, filesystem: FileSystem | None = None) -> None:
        """`root`: a local path or a pyarrow filesystem URI; with `filesystem`, a path in it."""
        self.location = ResultsRoot(root, filesystem)
        self.root = self.location.root  # a Path for a local root, else the URI as given

    @property
    def levels_dir(self) -> Path | str:
        return self.location.public("levels")

    @property
    def runs_dir(self) -> Path | str:
        return self.location.public("runs")

    @property
    def requests_dir(self) -> Path | str:
        return self.location.public("requests")

    def level_path(
        self, run_id: str, variant: str, concurrency: int, target: str, shape: str | None = None
    ) -> Path | str:
        rel = _level_rel("levels", run_id, variant, concurrency, target, shape)
        return self.location.public(rel)

    def requests_path(
        self, run_id: str, variant: str, concurrency: int, target: str, shape: str | None = None
    ) -> Path | str:
        rel = _level_rel("requests", run_id, variant, concurrency, target, shape)
        return self.location.public(rel)

    def run_path(self, run_id: str) -> Path | str:
        return self.location.public(f"runs/{run_id}.parquet")

    def has_level(
        self,
        run_id: str,
        variant: str,
        concurrency: int,
        target: str | None = None,
        shape: str | None = None,
    ) -> bool:
        """Measured on `target` (None: on any target) in this run; `shape`: the cell's shape
        in a run of several shapes (None: a single-shape run).

        A file from before targets were in the name counts for every target.
        """
        stem = _level_stem(variant, concurrency, shape)
        if self.location.exists(f"levels/{run_id}/{stem}.parquet"):
            return True
        if target is not None:
            rel = _level_rel("levels", run_id, variant, concurrency, target, shape)
            return self.location.exists(rel)
        files = self.location.files(f"levels/{run_id}", ".parquet", recursive=False)
        return any(f.rpartition("/")[2].startswith(f"{stem}@") for f in files)

    def write_level(self, row: dict[str, Any], *, by_shape: bool = False) -> Path | str:
        """`by_shape`: the run has several shapes, and the file name carries the row's."""
        shape = row["shape"] if by_shape else None
        rel = _level_rel(
            "levels", row["run_id"], row["variant"], row["concurrency"], row["target"], shape
        )
        return self.location.write(rel, _parquet_bytes(_conform([row], LEVELS_SCHEMA)))

    def write_requests(
        self,
        run_id: str,
        variant: str,
        concurrency: int,
        target: str,
        rows: list[dict[str, Any]],
        shape: str | None = None,
    ) -> Path | str:
        rel = _level_rel("requests", run_id, variant, concurrency, target, shape)
        return self.location.write(rel, _parquet_bytes(_conform(rows, REQUESTS_SCHEMA)))

    def write_run(self, row: dict[str, Any]) -> Path | str:
        rel = f"runs/{row['run_id']}.parquet"
        return self.location.write(rel, _parquet_bytes(_conform([row], RUNS_SCHEMA)))

    def phases_path(self, run_id: str, variant: str, target: str) -> Path | str:
        return self.location.public(_phases_rel(run_id, variant, target))

    def write_phases(
        self, run_id: str, variant: str, target: str, phases: dict[str, float]
    ) -> Path | str:
        """A variant's phase timings on one target, beside the run so a crash cannot lose
        them; `held_from_unix`/`held_until_unix` bound the server's life on that target."""
        rel = _phases_rel(run_id, variant, target)
        return self.location.write(rel, json.dumps(phases).encode())

    def read_phase_record(self, run_id: str, variant: str, target: str) -> dict[str, float] | None:
        """One variant's phase record on one target (None before its first launch)."""
        rel = _phases_rel(run_id, variant, target)
        if not self.location.exists(rel):
            return None
        return json.loads(self.location.read_bytes(self.location.path(rel)))

    def read_phase_files(self, run_id: str) -> list[tuple[str, str | None, dict[str, float]]]:
        """(variant, target, phases) per sidecar; target None for files from before
        targets were in the name."""
        out = []
        for path in self.location.files(f"phases/{run_id}", ".json", recursive=False):
            stem = path.rpartition("/")[2].removesuffix(".json")
            variant, _, target = stem.partition("@")
            out.append((variant, target or None, json.loads(self.location.read_bytes(path))))
        return out

    def read_phases(self, run_id: str) -> dict[str, dict[str, float]]:
        """variant -> phases; `variant@target` where a variant ran on several targets."""
        files = self.read_phase_files(run_id)
        count: dict[str, int] = {}
        for variant, _, _ in files:
            count[variant] = count.get(variant, 0) + 1
        return {(v if count[v] == 1 or t is None else f"{v}@{t}"): phases for v, t, phases in files}

    # --- the drift calibration: one per (run, target), before its first level -------
    def write_drift(self, run_id: str, target: str, calibration: dict[str, Any]) -> Path | str:
        """The target's drift calibration in this run (loadgen.calibration): every later
        level of the run on that target reads it, a resumed run does not measure it again."""
        rel = f"drift/{run_id}/{target_slug(target)}.json"
        return self.location.write(rel, json.dumps(calibration).encode())

    def read_drift(self, run_id: str, target: str) -> dict[str, Any] | None:
        """The target's drift calibration in this run; None when none was measured."""
        rel = f"drift/{run_id}/{target_slug(target)}.json"
        if not self.location.exists(rel):
            return None
        data: dict[str, Any] = json.loads(self.location.read_bytes(self.location.path(rel)))
        return data

    # --- a search's predictions (kept apart from every measurement) ----------------
    def _predictions_rel(self, run_id: str, target: str, variant: str | None) -> str:
        stage = "final" if variant is None else f"before_launch-{variant}"
        return f"predictions/{run_id}/{stage}@{target_slug(target)}.parquet"

    def has_prediction(self, run_id: str, target: str, variant: str) -> bool:
        """A variant's before-launch prediction exists: a resumed search keeps the first."""
        return self.location.exists(self._predictions_rel(run_id, target, variant))

    def write_predictions(
        self, run_id: str, target: str, variant: str | None, rows: list[dict[str, Any]]
    ) -> Path | str:
        """`variant`: its before-launch prediction; None: the search's final predictions
        (every variant of the grid), replaced each time the search re-plans."""
        rel = self._predictions_rel(run_id, target, variant)
        return self.location.write(rel, _parquet_bytes(_conform(rows, PREDICTIONS_SCHEMA)))

    def read_predictions(self, run_id: str) -> pd.DataFrame:
        return _read(self.location, f"predictions/{run_id}", PREDICTIONS_SCHEMA)

    # --- a fleet run's baseline plan (one row per host) -----------------------------
    def write_host_plan(self, row: dict[str, Any]) -> Path | str:
        """A host's role in the run's baselines; rewritten when the sweep re-decides it."""
        rel = f"hosts/{row['run_id']}/{target_slug(row['target'])}.parquet"
        return self.location.write(rel, _parquet_bytes(_conform([row], HOSTS_SCHEMA)))

    def read_host_plans(self, run_id: str) -> pd.DataFrame:
        """The run's host plans (empty for a single-target run or fleet.baseline once)."""
        return _read(self.location, f"hosts/{run_id}", HOSTS_SCHEMA)

    def run_ids(self) -> list[str]:
        return sorted(self.location.folders("levels"))

    def latest_run_id(self) -> str | None:
        ids = self.run_ids()
        return ids[-1] if ids else None

    def read_levels(self, run_id: str | None = None) -> pd.DataFrame:
        """All level rows (or one run's), one schema whatever the files' age."""
        rel = f"levels/{run_id}" if run_id else "levels"
        return fill_shape(_read(self.location, rel, LEVELS_SCHEMA))

    def read_requests(
        self, run_id: str | None = None, columns: list[str] | None = None
    ) -> pd.DataFrame:
        rel = f"requests/{run_id}" if run_id else "requests"
        return _read(self.location, rel, REQUESTS_SCHEMA, columns)

    def read_run(self, run_id: str) -> dict[str, Any] | None:
        rel = f"runs/{run_id}.parquet"
        if not self.location.exists(rel):
            return None
        return pq.read_table(
            self.location.path(rel), filesystem=self.location.filesystem
        ).to_pylist()[0]
