"""The report files and the report/compare/regression commands, on a synthetic store."""

from __future__ import annotations

import base64
import re
from html import escape as html_escape

import pytest
from typer.testing import CliRunner

from specsweep.analysis import LatencySLO, analyze_run
from specsweep.cli import app
from specsweep.report.render import level_records, write_report
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import SPEC, baseline_tput, level_row, night, sweep_rows, write

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultsStore:
    """Two runs: 'a' measured once per level, 'b' with 3 repeats and SPEC 10% faster at c=1."""
    store = ResultsStore(tmp_path_factory.mktemp("results"))
    write(store, sweep_rows("20261101T000000Z-aaaaaa"))
    rows = sweep_rows("20261102T000000Z-bbbbbb", repeats=3, cv=0.01, sglang_version="0.5.10")
    for r in rows:
        if r["variant"] == SPEC and r["concurrency"] == 1:
            r["output_throughput"] *= 1.10
    write(store, rows)
    return store


def test_report_files_embed_plots_and_carry_the_policy(store, tmp_path):
    answer = analyze_run(store, slo=LatencySLO(ttft_p99_ms=100))
    assert answer.run_id == "20261102T000000Z-bbbbbb"  # the latest by default
    files = write_report(answer, tmp_path / "out")
    html = files.html.read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 4
    assert all(base64.b64decode(i).startswith(PNG_MAGIC) for i in images)
    assert 'src="http' not in html and "<link" not in html  # nothing outside the file
    assert html_escape(answer.first.policy.rule()) in html
    assert "NVIDIA H200" in html and "0.5.10" in html
    assert "python -m sglang.launch_server" in html
    md = files.markdown.read_text()
    assert md.count("](plots/") == 4
    assert "| concurrency | baseline | eagle3-s2-k1-d3 | best | speedup |" in md
    assert "### Pivot points" in md and "### Best variant within the latency SLO" in md
    for path in files.plots.values():
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def test_level_records_are_json_safe_with_speedup(store):
    answer = analyze_run(store, "20261101T000000Z-aaaaaa")
    records = level_records(answer)
    assert records[0]["variant"] == "baseline"
    spec1 = next(r for r in records if r["variant"] == SPEC and r["concurrency"] == 1)
    assert spec1["speedup_vs_baseline"] == pytest.approx(1.45)
    assert spec1["repeats"] is None  # NaN is not JSON


def test_cli_report_writes_into_the_results_tree(store):
    result = runner.invoke(
        app, ["report", "--results-dir", str(store.root), "--traffic", "1=3,2=1"]
    )
    assert result.exit_code == 0, result.output
    assert "Deploy SGLang adaptive tiers 1:[2] 24:[0] (EAGLE3 chains)." in result.output
    assert "pivot at c≈22.6" in result.output
    assert (store.root / "reports" / "20261102T000000Z-bbbbbb" / "report.html").exists()


@pytest.mark.parametrize(
    ("traffic", "code", "message"),
    [
        ("1=x", 2, "error: --traffic: '1=x' is not concurrency=weight"),
        ("1", 2, "error: --traffic: '1' is not concurrency=weight"),
        ("1=-1", 2, "error: --traffic: Value error, traffic weights must be >= 0"),
        (
            "3=1",
            1,
            "error: traffic mix weights concurrency [3], not measured for the baseline and a "
            "speculative variant (measured: [1, 2, 4, 8, 16, 32])",
        ),
    ],
)
def test_cli_report_rejects_a_bad_traffic_mix(store, traffic, code, message):
    """A malformed mix is a usage error (2); a mix naming unmeasured levels fails (1)."""
    result = runner.invoke(
        app,
        [
            "report",
            "--results-dir",
            str(store.root),
            "--traffic",
            traffic,
            "--out",
            "/nonexistent/never",
        ],
    )
    assert result.exit_code == code, result.output
    assert " ".join(result.output.split()) == message  # rich wraps long lines


def test_cli_compare_shows_change_noise_and_environment(store):
    result = runner.invoke(
        app,
        [
            "compare",
            "20261101T000000Z-aaaaaa",
            "20261102T000000Z-bbbbbb",
            "--results-dir",
            str(store.root),
        ],
    )
    assert result.exit_code == 0, result.output
    spec1 = next(line for line in result.output.splitlines() if SPEC in line and "│  1 │" in line)
    assert "+10.0%" in spec1 and "faster" in spec1
    assert "within noise" in result.output
    assert "sglang_version: 0.5.9 -> 0.5.10" in result.output


def test_cli_regression_exit_code(tmp_path):
    store = ResultsStore(tmp_path)
    for i, m in enumerate([1.0, 1.01, 0.99, 1.0]):
        run_id, start = night(i)
        write(store, [level_row(run_id, SPEC, 8, baseline_tput(8) * m, started_at=start)])
    run_id, start = night(4)
    write(store, [level_row(run_id, SPEC, 8, baseline_tput(8) * 0.9, started_at=start)])
    result = runner.invoke(app, ["regression", "--results-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "REGRESSION" in result.output and "output_throughput" in result.output
    result = runner.invoke(app, ["regression", night(3)[0], "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
