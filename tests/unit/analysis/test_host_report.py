"""The report's Hosts section, the GPU-kind warning and the answer artifact on fleet runs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from specsweep.analysis import analyze, analyze_run
from specsweep.cli import app
from specsweep.report.render import answer_markdown, level_records, markdown, write_report
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import SPEC, frame, on_target, sweep_rows, write

RUN = "20261101T020000Z-fleet2"
runner = CliRunner()


def two_hosts(factor: float = 0.8, **b_facts) -> list[dict]:
    """gpu-a measures both variants; gpu-b re-measures them, `factor` as fast, a minute later."""
    a = sweep_rows(RUN, target="gpu-a", gpu_host="gpu-a.lan", driver_version="550.54")
    return a + on_target(a, "gpu-b", factor, later=timedelta(minutes=1), **b_facts)


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory) -> ResultsStore:
    store = ResultsStore(tmp_path_factory.mktemp("fleet"))
    # gpu-a lost SPEC from c=8 and gpu-b re-ran SPEC: the answer takes SPEC from gpu-b.
    rows = [
        r for r in two_hosts(gpu_uuids="GPU-b0") if r["target"] == "gpu-a" or not r["is_baseline"]
    ]
    for r in rows:
        if r["target"] == "gpu-a" and r["variant"] == SPEC and r["concurrency"] >= 8:
            r.update(status="failed", error="host unreachable")
    write(store, rows)
    write(store, sweep_rows("20261102T020000Z-single1"))
    return store


def test_report_has_a_hosts_section_for_a_multi_host_run(fleet_store, tmp_path):
    answer = analyze_run(fleet_store, RUN)
    files = write_report(answer, tmp_path / "fleet")
    md = files.markdown.read_text()
    assert "## Hosts" in md
    assert "### Hosts: one row per target" in md
    assert "### Levels measured on several targets" in md
    assert "### Rows left out of the answer" in md
    assert "| gpu-b | gpu-b.lan | 1x NVIDIA H200 | 550.54 | GPU-b0 |" in md
    assert "](plots/hosts.png)" in md and md.index("## Hosts") < md.index("](plots/hosts.png)")
    assert "host unreachable" not in md.split("## Hosts")[0]  # not among the answer's failures
    html = files.html.read_text()
    assert "<h2>Hosts</h2>" in html and "Levels measured on several targets" in html
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 5
    assert "different GPU kinds" not in md  # same GPU kind on both


def test_report_of_a_single_host_run_has_no_hosts_section(fleet_store, tmp_path):
    answer = analyze_run(fleet_store, "20261102T020000Z-single1")
    files = write_report(answer, tmp_path / "single")
    md, html = files.markdown.read_text(), files.html.read_text()
    assert "Hosts" not in md and "Hosts" not in html
    assert "hosts" not in files.plots and len(files.plots) == 4
    assert "Measured on" not in answer_markdown(answer)
    assert "target" not in level_records(answer)[0]


def test_gpu_kind_warning_is_shown_only_when_identities_differ():
    rows = sweep_rows(RUN, target="gpu-a")
    mixed = [r for r in rows if r["variant"] == "baseline"]
    mixed += on_target([r for r in rows if r["variant"] == SPEC], "gpu-b", gpu_name="NVIDIA H100")
    answer = analyze(frame(mixed), RUN)
    warning = "> Variants were measured on different GPU kinds: baseline on gpu-a (1x NVIDIA H200)"
    assert warning in markdown(answer, {})
    assert warning in answer_markdown(answer)
    assert "compare hosts before trusting the ranking." in answer_markdown(answer)
    same = analyze(frame(two_hosts(1.0)), RUN)
    assert "different GPU kinds" not in markdown(same, {}) + answer_markdown(same)


def test_answer_artifact_names_the_hosts_in_one_line(fleet_store):
    text = answer_markdown(analyze_run(fleet_store, RUN))
    lines = [line for line in text.splitlines() if "Measured on 2 targets" in line]
    assert len(lines) == 1
    assert "gpu-a (baseline in the answer), gpu-b (eagle3-s2-k1-d3 in the answer)" in lines[0]
    assert "gpu-b is 20.0% slower than the fastest" in lines[0]


def test_level_records_list_every_target_and_which_the_answer_used(fleet_store):
    records = level_records(analyze_run(fleet_store, RUN))
    spec1 = [r for r in records if r["variant"] == SPEC and r["concurrency"] == 1]
    assert [(r["target"], r["in_answer"]) for r in spec1] == [("gpu-b", True), ("gpu-a", False)]
    assert spec1[0]["speedup_vs_baseline"] == pytest.approx(1.45 * 0.8)  # gpu-b vs gpu-a's base
    assert spec1[1]["speedup_vs_baseline"] is None


def test_cli_report_prints_the_hosts_table(fleet_store):
    result = runner.invoke(app, ["report", RUN, "--results-dir", str(fleet_store.root)])
    assert result.exit_code == 0, result.output
    assert "Hosts" in result.output and "gpu-b.lan" in result.output
    assert "slower" in result.output
    single = runner.invoke(
        app, ["report", "20261102T020000Z-single1", "--results-dir", str(fleet_store.root)]
    )
    assert single.exit_code == 0 and "Hosts" not in single.output


def test_cli_compare_says_a_run_spans_targets(fleet_store):
    result = runner.invoke(
        app,
        ["compare", "20261102T020000Z-single1", RUN, "--results-dir", str(fleet_store.root)],
    )
    assert result.exit_code == 0, result.output
    assert f"run {RUN} was measured on 2 targets" in result.output
    assert "changed: gpu_host:" in result.output
