from datetime import UTC, datetime

import pandas as pd
import pyarrow.parquet as pq
import pytest

from specsweep.analysis.summary import summarize
from specsweep.config import LoadSpec, ServerSpec, Variant
from specsweep.loadgen.metrics import LevelMetrics, RequestRecord, compute_level_metrics
from specsweep.loadgen.runner import LevelResult
from specsweep.results.rows import RunContext, level_row
from specsweep.results.schema import LEVELS_SCHEMA, METRIC_FIELDS
from specsweep.results.store import ResultsStore, new_run_id
from specsweep.targets.server_facts import ServerFacts


def record(i: int, tokens: int = 8, error: str | None = None) -> RequestRecord:
    times = tuple(0.1 + 0.01 * k for k in range(tokens)) if error is None else ()
    return RequestRecord(
        index=i, start=0.0, end=0.1 + 0.01 * tokens, chunk_times=times,
        chunk_tokens=(1,) * len(times), prompt_tokens=16,
        output_tokens=0 if error else tokens, finish_reason=None if error else "length",
        spec_verify_ct=None, spec_accept_length=None, error=error,
    )  # fmt: skip


def result(concurrency: int, records: list[RequestRecord]) -> LevelResult:
    now = datetime.now(UTC)
    metrics = compute_level_metrics(records, concurrency, 0.05)
    return LevelResult(metrics=metrics, records=tuple(records), started_at=now, ended_at=now)


def row_for(variant: Variant, concurrency: int, run_id: str = "r1", **server_kw) -> dict:
    server = ServerSpec(model_path="m", max_running_requests=8, **server_kw)
    ctx = RunContext(run_id, "step_sweep", "t", "local")
    res = result(concurrency, [record(i) for i in range(4)])
    return level_row(ctx, server, variant, LoadSpec(), ServerFacts("0.5.9", False), res)


def test_metric_columns_match_loadgen():
    names = [f.name for f in METRIC_FIELDS]
    assert names == list(LevelMetrics.__dataclass_fields__)[1:]  # all but concurrency
    assert "concurrency" in LEVELS_SCHEMA.names


def test_write_is_atomic_and_round_trips(tmp_path):
    store = ResultsStore(tmp_path)
    spec = Variant(algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1)
    path = store.write_level(row_for(spec, 4, env={"HF_TOKEN": "hf_x"}))
    assert path == tmp_path / "levels" / "r1" / "eagle3-s2-k1-d3__c00004@local.parquet"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    assert pq.read_schema(path).equals(LEVELS_SCHEMA, check_metadata=False)
    df = pd.read_parquet(tmp_path / "levels")  # readable without specsweep
    assert len(df) == 1 and df.loc[0, "num_draft_tokens"] == 3
    assert "hf_x" not in df.loc[0, "server_command"] and "hf_x" not in df.loc[0, "env"]
    assert store.has_level("r1", "eagle3-s2-k1-d3", 4)
    assert store.read_levels("r1").loc[0, "completed"] == 4


def test_one_level_on_two_hosts_keeps_both(tmp_path):
    store = ResultsStore(tmp_path)
    a, b = row_for(Variant(), 4), row_for(Variant(), 4)
    b["target"], b["output_throughput"] = "gpu-b", 123.0
    store.write_level(a)
    assert store.has_level("r1", "baseline", 4, "local")
    assert not store.has_level("r1", "baseline", 4, "gpu-b")  # measured elsewhere: not here
    assert store.has_level("r1", "baseline", 4)  # ... but somewhere in the run
    store.write_level(b)
    levels = store.read_levels("r1").sort_values("target")
    assert list(levels["target"]) == ["gpu-b", "local"]
    assert levels.iloc[0]["output_throughput"] == 123.0


def test_files_from_before_targets_were_in_the_name_still_count(tmp_path):
    store = ResultsStore(tmp_path)
    path = store.write_level(row_for(Variant(), 2))
    path.rename(path.with_name("baseline__c00002.parquet"))  # the old layout
    assert store.has_level("r1", "baseline", 2, "local") and store.has_level("r1", "baseline", 2)
    assert len(store.read_levels("r1")) == 1


def test_phases_are_kept_per_variant_and_host(tmp_path):
    store = ResultsStore(tmp_path)
    store.write_phases("r1", "baseline", "gpu-a", {"held_from_unix": 1.0})
    store.write_phases("r1", "eagle", "gpu-a", {"benchmark_s": 2.0})
    store.write_phases("r1", "baseline", "gpu-b", {"held_from_unix": 3.0, "held_until_unix": 4.0})
    assert store.read_phases("r1") == {
        "baseline@gpu-a": {"held_from_unix": 1.0},
        "baseline@gpu-b": {"held_from_unix": 3.0, "held_until_unix": 4.0},
        "eagle": {"benchmark_s": 2.0},  # one host: keyed by the variant alone
    }
    files = store.read_phase_files("r1")
    assert [(v, t) for v, t, _ in files] == [
        ("baseline", "gpu-a"),
        ("baseline", "gpu-b"),
        ("eagle", "gpu-a"),
    ]


def test_unknown_columns_are_refused(tmp_path):
    row = row_for(Variant(), 1)
    row["bogus"] = 1
    with pytest.raises(ValueError, match="bogus"):
        ResultsStore(tmp_path).write_level(row)


def test_run_ids_sort_by_time():
    a = new_run_id(datetime(2026, 1, 1, tzinfo=UTC))
    b = new_run_id(datetime(2026, 1, 2, tzinfo=UTC))
    assert a < b and a.startswith("20260101T000000Z-")


def test_summary_best_and_speedup_skip_failed_levels(tmp_path):
    store = ResultsStore(tmp_path)
    spec = Variant(algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1)
    rows = [row_for(Variant(), c) for c in (1, 8)] + [row_for(spec, c) for c in (1, 8)]
    rows[0]["output_throughput"], rows[1]["output_throughput"] = 100.0, 700.0
    rows[2]["output_throughput"], rows[3]["output_throughput"] = 150.0, 9999.0
    rows[3]["status"], rows[3]["error"] = "failed", "boom"
    for r in rows:
        store.write_level(r)
    s = summarize(store.read_levels("r1"))
    assert list(s.throughput.columns) == ["baseline", "eagle3-s2-k1-d3"]
    best = s.best.set_index("concurrency")
    assert best.at[1, "best_variant"] == "eagle3-s2-k1-d3" and best.at[1, "speedup"] == 1.5
    assert best.at[8, "best_variant"] == "baseline" and best.at[8, "speedup"] == 1.0
    assert s.failed_levels.to_dict("records") == [
        {"variant": "eagle3-s2-k1-d3", "concurrency": 8, "error": "boom"}
    ]


def test_files_from_before_a_column_existed_still_read(tmp_path):
    store = ResultsStore(tmp_path)
    path = store.write_level(row_for(Variant(), 2))
    old = pq.read_table(path).drop_columns(["steady_output_throughput", "repeats"])
    pq.write_table(old, path)
    df = store.read_levels("r1")
    assert len(df) == 1 and pd.isna(df.loc[0, "steady_output_throughput"])
    assert df.loc[0, "completed"] == 4


def test_a_schema_6_level_reads_its_drift_as_null(tmp_path):
    store = ResultsStore(tmp_path)
    path = store.write_level(row_for(Variant(), 2))
    assert store.read_levels("r1").loc[0, "throughput_drift_source"] == "assumed"
    old = pq.read_table(path).drop_columns(["throughput_drift", "throughput_drift_source"])
    pq.write_table(old, path)  # as schema 6 wrote it: intervals with the +-1.5% floor
    df = store.read_levels("r1")
    assert pd.isna(df.loc[0, "throughput_drift"]) and pd.isna(df.loc[0, "throughput_drift_source"])


def test_a_level_says_how_its_streams_were_phased_and_older_files_read_null(tmp_path):
    store = ResultsStore(tmp_path)
    path = store.write_level(row_for(Variant(), 2))
    assert store.read_levels("r1").loc[0, "phases"] == "spread"  # LoadSpec's default
    old = pq.read_table(path).drop_columns(["phases"])
    pq.write_table(old, path)  # as schema 8 wrote it: streams together, whole-pass rates
    assert pd.isna(store.read_levels("r1").loc[0, "phases"])


def test_the_drift_calibration_is_kept_per_run_and_host(tmp_path):
    store = ResultsStore(tmp_path)
    assert store.read_drift("r1", "gpu-a") is None
    store.write_drift("r1", "gpu-a", {"drift": 0.004, "df": 7})
    store.write_drift("r1", "gpu/b", {"drift": 0.009, "df": 7})
    assert store.read_drift("r1", "gpu-a") == {"drift": 0.004, "df": 7}
    assert store.read_drift("r1", "gpu/b") == {"drift": 0.009, "df": 7}
    assert store.read_drift("r2", "gpu-a") is None


def test_local_files_are_0644_and_a_failed_rename_leaves_nothing(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path)
    written = [
        store.write_level(row_for(Variant(), 1)),
        store.write_phases("r1", "baseline", "local", {"benchmark_s": 1.0}),
    ]
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {"0o644"}

    def fail(src, dst):
        raise OSError("injected")

    monkeypatch.setattr("os.replace", fail)
    with pytest.raises(OSError, match="injected"):
        store.write_level(row_for(Variant(), 2))
    assert sorted(p.name for p in (tmp_path / "levels" / "r1").iterdir()) == [
        "baseline__c00001@local.parquet"  # neither the file nor its temporary copy
    ]


def test_rows_read_back_in_file_order_across_runs(tmp_path):
    store = ResultsStore(tmp_path)
    for run in ("r2", "r1", "r10"):
        for c in (8, 1, 2):
            store.write_level(row_for(Variant(), c, run_id=run))
    levels = store.read_levels()
    assert list(zip(levels["run_id"], levels["concurrency"], strict=True)) == [
        (r, c) for r in ("r1", "r10", "r2") for c in (1, 2, 8)
    ]
    assert store.run_ids() == ["r1", "r10", "r2"] and store.latest_run_id() == "r2"
