"""Every command that reads a stored run works on interrupted, failed and resumed runs.

An interrupted run keeps its `running` row (`ended_at` None: the orchestrator was killed);
a failed run names its failed variant and keeps a failed level; a resumed run kept its
first start and has levels from two attempts. Each is built with the rows the flows write
(run_row), and each reading command is run on it through the CLI.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.results.rows import RunContext
from specsweep.results.runs import run_row
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data
from tests.synthetic_levels import night, static_rows, write

runner = CliRunner()
RATIOS = {2: {1: 1.4, 8: 1.2, 32: 0.8}}
HISTORY = 3  # completed nights before the runs under test, for regression and compare
STATES = ("interrupted", "failed", "resumed")
STEPS2 = "eagle3-s2-k1-d3"


def _config(tmp_path):
    data = sim_config_data(tmp_path, 31000, step_sweep={"num_steps": [2], "draft_model_path":
                           "draft/eagle3"}, results_dir=str(tmp_path / "results"))  # fmt: skip
    return parse_config(data)


def _store_run(store, config, i: int, state: str) -> str:
    """Night i's run in `state`, with the runs row the flows would have left."""
    run_id, start = night(i)
    rows = static_rows(run_id, RATIOS, started_at=start)
    ctx = RunContext(run_id, "step_sweep", "test", "gpu-host")
    variants = sweep_variants(config, "step-sweep")
    errors: dict[str, str] = {}
    status = "completed"
    if state == "interrupted":  # killed after the baseline: only its levels, the running row
        rows = [r for r in rows if r["variant"] == "baseline"]
        status = "running"
    elif state == "failed":  # the speculative server died at c=32
        for r in rows:
            if r["variant"] == STEPS2 and r["concurrency"] == 32:
                r.update(status="failed", error="server exited", output_throughput=None)
        errors = {STEPS2: "ServerCrashed: server exited"}
        status = "failed"
    elif state == "resumed":  # the speculative levels came from the second attempt, later
        for r in rows:
            if r["variant"] != "baseline":
                r["started_at"] += timedelta(hours=1)
                r["ended_at"] += timedelta(hours=1)
    write(store, rows)
    store.write_run(run_row(config, ctx, variants, errors, start, status=status))
    return run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[ResultsStore, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("states")
    store = ResultsStore(tmp / "results")
    config = _config(tmp)
    for i in range(HISTORY):
        _store_run(store, config, i, "completed")
    ids = {state: _store_run(store, config, HISTORY + n, state) for n, state in enumerate(STATES)}
    return store, ids


def _invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{args}: {result.exception!r}\n{result.output}"
    )
    return result


@pytest.mark.parametrize("state", STATES)
def test_report_reads_the_run(runs, state, tmp_path):
    store, ids = runs
    result = _invoke("report", ids[state], "--results-dir", str(store.root), "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").exists()
    if state == "interrupted":  # said to be unfinished, not given an end
        assert "not ended" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("state", STATES)
def test_summary_reads_the_run(runs, state):
    store, ids = runs
    result = _invoke("summary", ids[state], "--results-dir", str(store.root))
    assert result.exit_code == 0, result.output
    assert f"run {ids[state]}" in result.output


@pytest.mark.parametrize("state", STATES)
def test_compare_reads_the_run(runs, state):
    store, ids = runs
    result = _invoke("compare", night(0)[0], ids[state], "--results-dir", str(store.root))
    assert result.exit_code == 0, result.output
    assert "output throughput" in result.output


@pytest.mark.parametrize("state", STATES)
def test_regression_judges_the_run(runs, state):
    store, ids = runs
    result = _invoke("regression", ids[state], "--results-dir", str(store.root))
    assert result.exit_code in (0, 1), result.output  # 1: a regression (the failed level)
    assert result.output.strip()


@pytest.mark.parametrize("state", STATES)
def test_policy_export_reads_the_run(runs, state):
    store, ids = runs
    result = _invoke("policy", "export", ids[state], "--results-dir", str(store.root))
    if state == "interrupted":  # only the baseline was measured: a refusal, said plainly
        assert result.exit_code == 1, result.output
        assert "error:" in result.output
    else:
        assert result.exit_code == 0, result.output
        assert '"candidate_steps"' in result.stdout


def test_a_run_interrupted_before_its_first_level_is_said_so(tmp_path):
    """No level rows at all, only the `running` row: each command answers, no traceback."""
    store = ResultsStore(tmp_path / "results")
    config = _config(tmp_path)
    run_id, start = night(0)
    variants = sweep_variants(config, "step-sweep")
    ctx = RunContext(run_id, "step_sweep", "test", "gpu-host")
    store.write_run(run_row(config, ctx, variants, {}, start, status="running"))
    root = str(store.root)
    for args in (("report", run_id), ("policy", "export", run_id)):
        result = _invoke(*args, "--results-dir", root)
        assert result.exit_code == 1 and "has no level rows" in result.output, result.output
    assert _invoke("summary", run_id, "--results-dir", root).exit_code == 0
    assert _invoke("regression", run_id, "--results-dir", root).exit_code == 0
