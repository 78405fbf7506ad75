"""The evidence is shown: ± on every level, near-ties marked with the variant to run, pivots
as a range or an inconclusive bracket with the level to add; in the report (Markdown and
HTML), the run's summary, the answer artifact, the CLI and the plots."""

from __future__ import annotations

import math
from html import escape as html_escape

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.patches import Rectangle
from typer.testing import CliRunner

from specsweep.analysis import analyze, analyze_run
from specsweep.analysis.summary import summarize
from specsweep.cli import app
from specsweep.report.evidence import INTERVALS_NOTE, pivot_cell, pivot_line, pm, target_ci_line
from specsweep.report.markdown import summary_markdown
from specsweep.report.plots import speedup_figure, throughput_figure
from specsweep.report.render import answer_markdown, level_records, write_report
from specsweep.report.tables import latency_tables
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import (
    LEVELS,
    SPEC,
    baseline_tput,
    chain_row,
    frame,
    level_row,
    sweep_rows,
    write,
)

RUN = "20261103T000000Z-ivals1"
S3 = "eagle3-s3-k1-d4"
runner = CliRunner()

# SPEC's ratio to the baseline is 1.45 - 0.1 log2 c (crosses at c = 22.6, between 16 and 32,
# both sure with ±2% levels: a crossing with a 95% range). S3 ties SPEC at c=1 (1.455 vs
# 1.45: the simpler SPEC is to run) and sits on 1.00 at c=8: its pivot is inconclusive
# between c=4 and c=16, and c=11 is the level to add. Every level aims at ±2% and all but S3
# at c=32 (±3.5%) reach it.
S3_RATIO = {1: 1.455, 2: 1.30, 4: 1.20, 8: 1.00, 16: 0.90, 32: 0.80}


def _interval(tput: float, half: float, **kw) -> dict:
    return dict(
        output_throughput_lo=tput * (1 - half),
        output_throughput_hi=tput * (1 + half),
        target_ci=0.02,
        target_ci_met=half <= 0.02,
        **kw,
    )


def evidence_rows() -> list[dict]:
    rows = []
    for c in LEVELS:
        b = baseline_tput(c)
        s2 = b * (1.45 - 0.1 * math.log2(c))
        s3 = b * S3_RATIO[c]
        latency = {"ttft_ms_p99_lo": 18.0, "ttft_ms_p99_hi": 23.0} if c == 1 else {}
        rows.append(level_row(RUN, "baseline", c, b, **_interval(b, 0.02, **latency)))
        rows.append(level_row(RUN, SPEC, c, s2, **_interval(s2, 0.02)))
        rows.append(chain_row(RUN, 3, c, s3, **_interval(s3, 0.035 if c == 32 else 0.02)))
    return rows


@pytest.fixture(scope="module")
def answer():
    return analyze(frame(evidence_rows()), RUN)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultsStore:
    store = ResultsStore(tmp_path_factory.mktemp("intervals"))
    write(store, evidence_rows())
    return store


def test_the_analysis_gives_what_the_rendering_tests_expect(answer):
    """The fixture's premises: a near-tie at c=1 and c=2, SPEC's crossing with a range, S3
    inconclusive between 4 and 16 (add c=11)."""
    best = answer.first.best.set_index("concurrency")
    assert best.at[1, "best_variant"] == S3 and best.at[1, "tied"] == SPEC
    assert best.at[1, "choice"] == SPEC
    assert bool(best.at[2, "near_tie"]) and not bool(best.at[4, "near_tie"])
    spec, s3 = answer.first.pivots[SPEC], answer.first.pivots[S3]
    assert spec.kind == "crosses" and spec.low == pytest.approx(18.5, abs=0.05)
    assert s3.kind == "inconclusive" and (s3.low, s3.high, s3.suggest) == (4, 16, 11)


def test_pm_is_the_one_style_and_says_nothing_without_an_interval():
    assert pm(2367.4, 2317.7, 2417.1) == "2,367.4 ±2.1%"
    assert pm(1.3215, 1.2838, 1.3602, ".2f", "x") == "1.32x ±2.9%"
    assert pm(2367.4) == pm(2367.4, math.nan, math.nan) == "2,367.4"
    assert pm(math.nan, 1, 2) == "—"


def test_summary_markdown_shows_intervals_near_ties_and_pivot_ranges():
    md = summary_markdown(RUN, summarize(frame(evidence_rows())), {})
    # every level with its ±; the variant tied with the best marked ≈
    assert "| 1 | 500.0 ±2.0% | ≈ 725.0 ±2.0% | 727.5 ±2.0% |" in md
    assert "| 32 | 8,000.0 ±2.0% | 7,600.0 ±2.0% | 6,400.0 ±3.5% |" in md
    # best per level: the interval, speedup, lead over the runner-up, the tie and the choice
    assert (
        f"| 1 | {S3} ≈ | 727.5 ±2.0% | 1.46x ±2.8% | 1.003x ±2.8% over {SPEC} "
        f"| ≈ {SPEC}; run {SPEC} (simplest) |"
    ) in md
    assert f"| 4 | {SPEC} | 1,894.6 ±2.0% | 1.25x ±2.8% | 1.042x ±2.8% over {S3} | no |" in md
    assert "| 32 | baseline | 8,000.0 ±2.0% | 1.00x |" in md  # the baseline is exactly 1x
    assert f"- {SPEC}: pivot at c≈22.6 (95%: c≈18.5 to 27.5); soft" in md
    assert f"- {S3}: crosses between c=4 and c=16" in md
    assert "add a level at c=11 (or repeat c=8)" in md
    assert INTERVALS_NOTE in md and "docs/metrics.md" in md
    assert f"missed at 1 of 18 levels (the time or request cap came first): {S3} c=32 (±3.5%)" in md


def test_summary_markdown_without_intervals_is_as_before():
    md = summary_markdown("r", summarize(frame(sweep_rows("r"))), {})
    assert "| 1 | 500.0 | 725.0 |" in md and "±" not in md and "| ≈" not in md
    assert "95%" not in md and "load.target_ci" not in md
    assert f"- {SPEC}: pivot at c≈22.6\n" in md


def test_report_tables_carry_the_evidence(answer, tmp_path):
    files = write_report(answer, tmp_path / "out")
    md = files.markdown.read_text()
    assert "| concurrency | baseline | eagle3-s2-k1-d3 | eagle3-s3-k1-d4 | best | speedup |" in md
    assert f"| 1 | 500.0 ±2.0% | ≈ 725.0 ±2.0% | **727.5 ±2.0%** | {S3} ≈ | 1.46x ±2.8% |" in md
    assert "### Best variant per level, and how sure" in md
    assert f"| **≈ {SPEC}; run {SPEC} (simplest)** |" in md  # the near-tie, in bold
    assert f"1.003x ±2.8% over {SPEC}" in md
    assert f"| {SPEC} | **22.6 (95%: 18.5 to 27.5), soft** |" in md
    assert f"| {S3} | **crosses between c=4 and c=16; add c=11** |" in md
    assert "(95%: +7.5% to +9.4%)" in md.split("### Speculation policy")[1].split("###")[0]
    # one tie rule, per level: c=16's clear 5% is kept, no weighted near-tie drops it
    assert "Near-tie:" not in md.split("### Speculation policy")[1].split("###")[0]
    assert INTERVALS_NOTE in md
    assert f"{S3} c=32 (±3.5%)" in md
    html = files.html.read_text()
    for text in (
        "≈ 725.0 ±2.0%",
        f"≈ {SPEC}; run {SPEC} (simplest)",
        "crosses between c=4 and c=16; add c=11",
        "22.6 (95%: 18.5 to 27.5), soft",
    ):
        assert html_escape(text) in html


def test_latency_cells_show_their_bootstrap_interval(answer):
    table = latency_tables(answer.first)
    baseline_c1 = next(r for r in table.rows if r[:2] == ["baseline", "1"])
    assert baseline_c1[3] == "20.00 ±12.5%"  # TTFT p99 18..23 ms
    assert baseline_c1[2] == "10.00"  # no interval: the value alone
    assert "bootstrap" in table.note


def test_answer_artifact_and_table_artifact_carry_the_intervals(answer):
    md = answer_markdown(answer)
    assert "### Best variant per level, and how sure" in md
    assert "≈ 725.0 ±2.0%" in md and "crosses between c=4 and c=16; add c=11" in md
    records = level_records(answer)
    spec1 = next(r for r in records if r["variant"] == SPEC and r["concurrency"] == 1)
    assert spec1["output_throughput_lo"] == pytest.approx(725.0 * 0.98, abs=1e-3)
    assert spec1["speedup_vs_baseline"] == pytest.approx(1.45)
    assert spec1["speedup_lo"] < 1.45 < spec1["speedup_hi"]
    assert spec1["target_ci_met"] is True and spec1["target_ci"] == 0.02
    base1 = next(r for r in records if r["variant"] == "baseline" and r["concurrency"] == 1)
    assert base1["speedup_vs_baseline"] == 1.0 and base1["speedup_lo"] is None


def test_target_ci_line_says_when_every_level_met_it():
    rows = [level_row("r", "baseline", c, 100.0, **_interval(100.0, 0.01)) for c in (1, 2)]
    assert target_ci_line(frame(rows)) == (
        "Target interval ±2.0% (load.target_ci): met at every level."
    )
    assert target_ci_line(frame(sweep_rows("r"))) is None  # no target: nothing said


def test_cli_summary_and_report_show_the_evidence(store, tmp_path):
    result = runner.invoke(app, ["summary", "--results-dir", str(store.root), "--wide"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "≈ 725.0 ±2.0%" in out and "1.46x ±2.8%" in out
    assert f"c=1: best {S3} ≈ {SPEC}; run {SPEC} (simplest)" in out  # a line per near-tie
    assert f"≈ {SPEC} │" in out  # the table's narrow "run" column: the variant to run
    assert f"{SPEC}: pivot at c≈22.6 (95%: c≈18.5 to 27.5)" in out
    assert f"{S3}: crosses between c=4 and c=16" in out and "add a level at c=11" in out
    assert f"{S3} c=32 (±3.5%)" in out
    result = runner.invoke(
        app, ["report", "--results-dir", str(store.root), "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    assert "Deploy eagle3-s2-k1-d3 up to c=16, then no speculation." in result.output
    assert f"c=1: best {S3} ≈ {SPEC}; run {SPEC} (simplest)" in result.output
    assert "add a level at c=11" in result.output


def _bands(ax) -> list[PolyCollection]:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def _vspans(ax, hatched: bool) -> list[Rectangle]:
    """Vertical spans (axvspan: full height in axes coordinates), hatched or not."""
    return [
        p
        for p in ax.patches
        if isinstance(p, Rectangle)
        and p.get_height() == pytest.approx(1.0)
        and bool(p.get_hatch()) == hatched
    ]


def test_plots_draw_bands_a_pivot_range_and_a_hatched_inconclusive_bracket(answer):
    ax = throughput_figure(answer.first).axes[0]
    assert len(_bands(ax)) == 3  # one 95% band per variant
    (span,) = _vspans(ax, hatched=False)  # SPEC's crossing: 18.5 to 27.5
    assert span.get_x() == pytest.approx(answer.first.pivots[SPEC].low)
    assert span.get_x() + span.get_width() == pytest.approx(answer.first.pivots[SPEC].high)
    (bracket,) = _vspans(ax, hatched=True)  # S3: between c=4 and c=16
    assert (bracket.get_x(), bracket.get_x() + bracket.get_width()) == (4, 16)
    assert any(t.get_text() == "crosses here: add c=11" for t in ax.texts)
    labels = ax.get_legend_handles_labels()[1] + [t.get_text() for t in ax.get_legend().get_texts()]
    assert "95% interval" in labels and "pivot between levels (within noise)" in labels
    ax = speedup_figure(answer.first).axes[0]
    assert len(_bands(ax)) == 2  # the two speculative variants' ratio intervals
    assert len(_vspans(ax, hatched=False)) == 1 and len(_vspans(ax, hatched=True)) == 1


def test_plots_without_intervals_draw_no_bands_or_spans():
    plain = analyze(frame(sweep_rows("r")), "r")
    for make in (throughput_figure, speedup_figure):
        ax = make(plain.first).axes[0]
        assert _bands(ax) == []
        assert _vspans(ax, hatched=False) == [] and _vspans(ax, hatched=True) == []


def test_the_store_round_trip_keeps_the_evidence(store):
    answer = analyze_run(store, RUN)
    assert answer.first.pivots[S3].kind == "inconclusive"
    assert answer.first.best.set_index("concurrency").at[1, "tied"] == SPEC


def test_an_inconclusive_pivot_over_the_whole_range_is_worded_and_drawn():
    """No sure level on either side: a sentence of its own, and the hatch over every level."""
    rows = []
    for c in LEVELS:
        b = baseline_tput(c)
        rows += [
            level_row("r", "baseline", c, b, **_interval(b, 0.02)),
            level_row("r", SPEC, c, b, **_interval(b, 0.02)),
        ]
    answer = analyze(frame(rows), "r")
    pivot = answer.first.pivots[SPEC]
    assert (pivot.kind, pivot.low, pivot.high) == ("inconclusive", None, None)
    assert pivot_cell(pivot).startswith("crosses in the measured range")
    assert pivot_line(pivot).startswith("crosses over the whole measured range")
    assert "crosses over the whole measured range" in answer_markdown(answer)
    (bracket,) = _vspans(throughput_figure(answer.first).axes[0], hatched=True)
    assert bracket.get_x() < LEVELS[0] and bracket.get_x() + bracket.get_width() > LEVELS[-1]
