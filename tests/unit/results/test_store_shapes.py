"""Cells of several load shapes in the store: their own files, resume per cell, and rows
from before shapes existed read as their own shape."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from specsweep.results.schema import LEVELS_SCHEMA
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import level_row


def test_a_cell_per_shape_has_its_own_file_and_resume_mark(tmp_path):
    store = ResultsStore(tmp_path)
    for ins in (512, 4096):
        row = level_row("r1", "baseline", 8, 100.0, input_len=ins, shape=f"in{ins}-out64")
        store.write_level(row, by_shape=True)
    names = sorted(p.name for p in (tmp_path / "levels" / "r1").iterdir())
    assert names == [
        "baseline__in4096-out64__c00008@gpu-host.parquet",
        "baseline__in512-out64__c00008@gpu-host.parquet",
    ]
    assert store.has_level("r1", "baseline", 8, "gpu-host", "in512-out64")
    assert not store.has_level("r1", "baseline", 8, "gpu-host", "in32768-out64")
    assert not store.has_level("r1", "baseline", 8, "gpu-host")  # single-shape name: not there
    levels = store.read_levels("r1")
    assert sorted(levels["shape"]) == ["in4096-out64", "in512-out64"]


def test_rows_from_before_shapes_read_as_their_own_shape(tmp_path):
    store = ResultsStore(tmp_path)
    row = level_row("old", "baseline", 4, 100.0, input_len=300, output_len=20)
    old_schema = pa.schema([f for f in LEVELS_SCHEMA if f.name not in ("shape", "workload")])
    path = tmp_path / "levels" / "old" / "baseline__c00004@gpu-host.parquet"
    path.parent.mkdir(parents=True)
    table = pa.Table.from_pylist([{n: row.get(n) for n in old_schema.names}], old_schema)
    pq.write_table(table, path)
    levels = store.read_levels("old")
    assert levels["shape"].tolist() == ["in300-out20"]
    assert levels["workload"].isna().all()
    assert store.has_level("old", "baseline", 4, "gpu-host")  # a resume still finds it


def test_requests_read_only_the_columns_asked_for(tmp_path):
    store = ResultsStore(tmp_path)
    assert list(store.read_requests("none", columns=["variant", "category"]).columns) == [
        "variant", "category",
    ]  # fmt: skip
