"""A sweep through the real flows and simulator into a results root given as a file:// URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsweep.config.file import parse_config
from specsweep.flows.step_sweep import step_sweep
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def test_step_sweep_into_a_file_uri_root(tmp_path, port, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a mangled root (Path("file:/...")) would land here
    root = tmp_path / "shared results"
    uri = root.as_uri()  # file:///.../shared%20results
    data = sim_config_data(tmp_path, port, results_dir=uri, load={"concurrency": [2]})
    config = parse_config(data)
    assert config.results_dir == uri
    result = step_sweep(config)
    run_id = result["run_id"]
    assert result["results_dir"] == uri
    store = ResultsStore(uri)
    levels = store.read_levels(run_id)
    assert sorted(levels["variant"]) == ["baseline", "eagle3-s2-k1-d3"]
    assert set(levels["status"]) == {"ok"} and store.has_level(run_id, "baseline", 2, "test-host")
    assert len(store.read_requests(run_id)) == 2 * config.load.num_requests(2)
    assert store.read_run(run_id)["status"] == "completed"
    assert set(store.read_phases(run_id)) == {"baseline", "eagle3-s2-k1-d3"}
    assert (root / "levels" / run_id).is_dir()  # the URI's path, decoded
    report = Path(result["answer"]["report_html"])
    assert report == root / "reports" / run_id / "report.html" and report.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared results", "work"]
