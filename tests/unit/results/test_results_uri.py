"""Results roots given as pyarrow filesystem URIs: file:// (local semantics), a non-local
filesystem (fsspec's in-memory one through pyarrow, and a SubTreeFileSystem), s3:// parsed
and resolved with no network, the pre-flight probe, and reports for a root elsewhere."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import fsspec
import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.config import Variant
from specsweep.config.file import parse_config
from specsweep.errors import ConfigError
from specsweep.report.render import LOCAL_REPORTS, default_report_dir
from specsweep.results.location import local_path
from specsweep.results.preflight import check_results_dir
from specsweep.results.schema import LEVELS_SCHEMA, SCHEMA_VERSION
from specsweep.results.store import ResultsStore
from tests.needs import missing
from tests.synthetic_levels import sweep_rows, write
from tests.unit.results.test_results_store import row_for

SPEC = Variant(algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1)
RUN = {"schema_version": SCHEMA_VERSION, "run_id": "r1", "sweep_kind": "step_sweep"}


def requests(n: int) -> list[dict]:
    row = {**RUN, "target": "local", "variant": "baseline", "concurrency": 4, "repeat": 0}
    return [row | {"index": i, "chunk_tokens": [1] * 5} for i in range(n)]


@pytest.fixture
def memory_uri():
    """A fresh prefix in fsspec's process-wide in-memory filesystem, as pyarrow's URI."""
    name = f"specsweep-{uuid.uuid4().hex[:8]}"
    yield f"fsspec+memory://{name}/results"
    memory = fsspec.filesystem("memory")
    if memory.exists(f"/{name}"):
        memory.rm(f"/{name}", recursive=True)


def fill(store: ResultsStore) -> None:
    """Two variants at one level on two hosts, their requests, phases and the runs row."""
    a, b = row_for(Variant(), 4), row_for(SPEC, 4)
    b["target"] = "gpu-b"
    store.write_level(a)
    store.write_level(b)
    store.write_requests("r1", "baseline", 4, "local", requests(3))
    store.write_phases("r1", "baseline", "local", {"held_from_unix": 1.0})
    store.write_phases("r1", SPEC.label, "gpu-b", {"benchmark_s": 2.0})
    store.write_run({**RUN, "status": "completed"})


def check_reads(store: ResultsStore) -> None:
    assert store.has_level("r1", "baseline", 4, "local") and store.has_level("r1", "baseline", 4)
    assert not store.has_level("r1", "baseline", 4, "gpu-b") and not store.has_level("r1", "x", 4)
    assert store.has_level("r1", SPEC.label, 4, "gpu-b")
    levels = store.read_levels("r1").sort_values("variant")
    assert list(levels["variant"]) == ["baseline", SPEC.label]
    assert list(levels["target"]) == ["local", "gpu-b"] and (levels["completed"] == 4).all()
    assert len(store.read_levels()) == 2 and len(store.read_requests("r1")) == 3
    assert store.read_phases("r1") == {"baseline": {"held_from_unix": 1.0}, SPEC.label: {
        "benchmark_s": 2.0}}  # fmt: skip
    assert store.read_run("r1")["status"] == "completed" and store.read_run("nope") is None
    assert store.run_ids() == ["r1"] and store.latest_run_id() == "r1"
    assert store.read_levels("nope").empty and store.read_requests("nope").empty


def test_file_uri_is_a_local_root_with_atomic_writes(tmp_path):
    root = tmp_path / "res ults"  # a space: percent-encoded in the URI
    uri = root.as_uri()
    assert "%20" in uri and local_path(uri) == root
    store = ResultsStore(uri)
    assert store.root == root  # a Path: file:// roots behave exactly like local paths
    fill(store)
    check_reads(store)
    path = store.level_path("r1", "baseline", 4, "local")
    assert path == root / "levels" / "r1" / "baseline__c00004@local.parquet" and path.exists()
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 6 and not [p for p in files if p.name.startswith(".")]  # no temp file
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}
    assert json.loads(store.phases_path("r1", "baseline", "local").read_text()) == {
        "held_from_unix": 1.0
    }
    check_reads(ResultsStore(root))  # the same store through the plain path
    bad = row_for(Variant(), 8)
    bad["bogus"] = 1
    with pytest.raises(ValueError, match="bogus"):
        store.write_level(bad)
    assert not store.has_level("r1", "baseline", 8)


def test_a_non_local_filesystem_round_trips_through_its_uri(memory_uri):
    store = ResultsStore(memory_uri)
    assert store.root == memory_uri
    fill(store)
    check_reads(store)
    check_reads(ResultsStore(memory_uri))  # another store, same filesystem: same answers
    assert store.levels_dir == f"{memory_uri}/levels"
    path = store.level_path("r1", "baseline", 4, "local")
    assert path == f"{memory_uri}/levels/r1/baseline__c00004@local.parquet"
    fs, inside = pafs.FileSystem.from_uri(path)  # what a user does with a printed path
    assert pq.read_table(inside, filesystem=fs).num_rows == 1
    names = [
        i.base_name
        for i in fs.get_file_info(pafs.FileSelector(store.location.path(""), recursive=True))
    ]
    assert not [n for n in names if n.startswith(".")]  # written directly, no temp objects


def test_old_files_read_with_new_columns_null_on_a_non_local_root(memory_uri):
    store = ResultsStore(memory_uri)
    path = store.write_level(row_for(Variant(), 2))
    fs, inside = pafs.FileSystem.from_uri(path)
    old = pq.read_table(inside, filesystem=fs).drop_columns(["steady_output_throughput"])
    pq.write_table(old, inside, filesystem=fs)
    frame = store.read_levels("r1")
    assert len(frame) == 1 and pd.isna(frame.loc[0, "steady_output_throughput"])
    assert list(frame.columns) == LEVELS_SCHEMA.names


def test_a_subtree_filesystem_takes_the_direct_write_path(tmp_path):
    """A real pyarrow filesystem that is not LocalFileSystem: one output stream per file,
    folders created where the filesystem has them, readable without specsweep."""
    subtree = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    store = ResultsStore("shared/results", filesystem=subtree)
    assert not store.location.is_local
    fill(store)
    check_reads(store)
    assert store.level_path("r1", "baseline", 4, "local") == (
        "shared/results/levels/r1/baseline__c00004@local.parquet"
    )
    on_disk = tmp_path / "shared" / "results"
    assert len(pd.read_parquet(on_disk / "levels")) == 2
    assert not [p for p in on_disk.rglob(".*")]  # no temp files on this path
    check_reads(ResultsStore(on_disk))


def test_config_keeps_uris_as_strings_and_paths_as_paths():
    def results_dir(value):
        return parse_config({"server": {"model_path": "m"}, "results_dir": value}).results_dir

    assert parse_config({"server": {"model_path": "m"}}).results_dir == Path("results")
    assert results_dir("out/results") == Path("out/results")
    s3 = "s3://bucket/x"
    assert results_dir(s3) == s3 and isinstance(results_dir(s3), str)  # not s3:/bucket/x
    assert results_dir("s3://bucket/x?region=eu-west-1") == "s3://bucket/x?region=eu-west-1"
    config = parse_config({"server": {"model_path": "m"}, "results_dir": s3})
    again = type(config).model_validate(json.loads(config.model_dump_json()))
    assert again.results_dir == s3  # a Prefect parameter round trip (JSON) keeps it
    assert ResultsStore(config.results_dir).level_path("r", "v", 1, "h") == (
        "s3://bucket/x/levels/r/v__c00001@h.parquet"  # paths only: nothing resolved yet
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("s3://AKIA:secret@bucket/x", "credentials do not belong in the URI"),
        ("s3://bucket/x?secret_key=abc", "credentials do not belong in the URI"),
        ("abfs://c@acct.dfs.core.windows.net/x?sas_token=sig", "credentials do not belong"),
        ("s4://bucket/x", "s4:// is not a filesystem results can live on"),
        ("mock:///x", "mock:// is not a filesystem"),
        ("file://host/x", "file:///abs/path"),
        ("file:///tmp/a b", "percent-encode spaces"),
    ],
)
def test_config_refuses_bad_results_uris(value, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_config({"server": {"model_path": "m"}, "results_dir": value})
    if "credentials" in message:
        assert value not in str(info.value)  # never echoed back


_S3_NO_NETWORK = textwrap.dedent(
    """
    import sys
    from specsweep.config.file import parse_config
    from specsweep.results.store import ResultsStore
    # No region in the URI: only paths, nothing resolved (pyarrow would ask S3 for it).
    lazy = ResultsStore(parse_config({"server": {"model_path": "m"},
                                      "results_dir": "s3://bucket/x"}).results_dir)
    print(lazy.level_path("r", "v", 1, "h"))
    store = ResultsStore("s3://bucket/x?region=eu-west-1")
    fs = store.location.filesystem
    print(type(fs).__name__, fs.region, store.location.path("levels"))
    """
)


def test_s3_uri_resolves_to_s3filesystem_without_network():
    """In a network namespace with no interfaces up: any request would fail, not hang."""
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        env.pop(name, None)
    proc = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", _S3_NO_NETWORK],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    if proc.returncode != 0 and "unshare" in proc.stderr:
        missing("USERNS", f"no user namespaces here (unshare -rn): {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "s3://bucket/x/levels/r/v__c00001@h.parquet",
        "S3FileSystem eu-west-1 bucket/x/levels",
    ]


def test_preflight_probes_a_non_local_root_and_leaves_nothing(memory_uri, caplog):
    config = parse_config({"server": {"model_path": "m"}, "results_dir": memory_uri})
    with caplog.at_level(logging.INFO, logger="specsweep.results.preflight"):
        check_results_dir(config, 2)
    assert "free space not checked" in caplog.text
    store = ResultsStore(memory_uri)
    assert store.location.files("", "") == []  # the probe was deleted


def test_preflight_refuses_a_root_pyarrow_cannot_open(tmp_path):
    config = parse_config(
        {"server": {"model_path": "m"}, "results_dir": "fsspec+nosuchprotocol://b/x"}
    )
    with pytest.raises(ConfigError, match="is not writable"):
        check_results_dir(config, 2)
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = parse_config(
        {"server": {"model_path": "m"}, "results_dir": (blocker / "results").as_uri()}
    )
    with pytest.raises(ConfigError, match="is not writable"):  # file://: the local checks
        check_results_dir(config, 2)


def test_report_dirs_for_each_kind_of_root(tmp_path):
    assert default_report_dir(tmp_path, "r") == tmp_path / "reports" / "r"
    assert default_report_dir(tmp_path.as_uri(), "r") == tmp_path / "reports" / "r"
    assert default_report_dir("s3://bucket/x", "r") == LOCAL_REPORTS / "r"


def test_cli_report_for_a_root_elsewhere_is_written_here(memory_uri, tmp_path, monkeypatch):
    store = ResultsStore(memory_uri)
    write(store, sweep_rows("20261101T000000Z-aaaaaa"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "--results-dir", memory_uri])
    assert result.exit_code == 0, result.output
    html = tmp_path / "specsweep-reports" / "20261101T000000Z-aaaaaa" / "report.html"
    assert html.exists() and "not on this machine" in result.output
    assert store.location.files("reports", "") == []  # nothing uploaded
    summary = CliRunner().invoke(app, ["summary", "--results-dir", memory_uri])
    assert summary.exit_code == 0 and "20261101T000000Z-aaaaaa" in summary.output
    bad = CliRunner().invoke(app, ["report", "--results-dir", "s4://x"])
    assert bad.exit_code == 2 and "not a filesystem" in bad.output


def test_requests_rows_on_a_non_local_root_keep_their_lists(memory_uri):
    store = ResultsStore(memory_uri)
    store.write_requests("r1", "baseline", 1, "h", requests(3))
    frame = store.read_requests("r1")
    assert len(frame) == 3 and list(frame.loc[0, "chunk_tokens"]) == [1] * 5
