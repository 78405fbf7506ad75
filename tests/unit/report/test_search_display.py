"""An adaptive search's outcome in every view: skipped levels apart from failures, the
variants not launched, the model's check against what was then measured, and nothing of
it for a run without a search. Measured and predicted never mix."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from specsweep.analysis import analyze_run, best_per_level
from specsweep.analysis.answer import search_view
from specsweep.analysis.summary import summarize
from specsweep.cli import app
from specsweep.report.markdown import summary_markdown
from specsweep.report.render import (
    answer_markdown,
    level_records,
    markdown,
    search_records,
    write_report,
)
from specsweep.report.search import search_lines, search_tables
from specsweep.report.tables import throughput_table
from specsweep.results.schema import SCHEMA_VERSION
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import (
    LEVELS,
    SPEC,
    T0,
    baseline_tput,
    chain_row,
    frame,
    sweep_rows,
    write,
)

runner = CliRunner()
SEARCH_RUN = "20261103T000000Z-search"
PLAIN_RUN = "20261102T000000Z-plain"
S4 = "eagle3-s4-k1-d5"  # launched, trailing: its c=16 and c=32 skipped
SKIP_REASON = "trailed the best (eagle3-s2-k1-d3) by 31% at c=4 and by 45% at c=8, falling"
STOP = "no unmeasured variant's upper bound beats the best measured by more than 1% at any level"
S4_RATIO = {1: 0.9, 2: 0.85, 4: 0.75, 8: 0.6}
# Not launched: (variant, steps, topk, draft tokens, predicted ratio to the measured best).
NOT_LAUNCHED = [
    ("eagle3-s6-k1-d7", 6, 1, 7, 0.50),
    ("eagle3-s3-k2-d8", 3, 2, 8, 0.97),
    ("eagle3-s5-k1-d6", 5, 1, 6, 0.80),
]


# The phase records: baseline held 60 s, SPEC 50 s after an earlier hold of 30 s (a
# relaunch), S4 40 s. Every synthetic level lasts 1 s, so the overheads beyond the levels
# are 54 s, (80 - 5) / 2 = 37.5 s per hold and 36 s: median 37.5 s. The whole grid: the
# 180 s held, plus 3 variants not launched at 37.5 + 6 x 1 s, plus the 3 levels not
# measured (SPEC's failed c=32, S4's skipped two) at 1 s: 313.5 s.
HOLDS = {
    "baseline": {"held_from_unix": 100.0, "held_until_unix": 160.0, "launch_to_ready_s": 40.0},
    SPEC: {
        "held_from_unix": 200.0, "held_until_unix": 250.0, "held_before_s": 30.0, "holds": 2.0,
        "launch_to_ready_s": 50.0,
    },
    S4: {"held_from_unix": 300.0, "held_until_unix": 340.0, "launch_to_ready_s": 30.0},
}  # fmt: skip
COST = (
    "4 launches (1 a relaunch) against the grid's 6 (67%); servers held 3.0 min (2.0 min of "
    "it launch to ready) against the whole grid's estimated 5.2 min (57%; each variant not "
    "launched at this run's median time per launch and per level)"
)


def spec_tput(c: int) -> float:
    return baseline_tput(c) * (1.45 - 0.1 * math.log2(c))


def best_measured(c: int) -> float:
    return max(spec_tput(c), baseline_tput(c))


def prediction(stage: str, variant: str, c: int, mid: float, lo: float, hi: float, **kw) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": SEARCH_RUN,
        "target": "gpu-host",
        "stage": stage,
        "variant": variant,
        "concurrency": c,
        "predicted_output_throughput": mid,
        "predicted_lo": lo,
        "predicted_hi": hi,
        "fit_on": '["baseline"]',
        "made_at": T0 + timedelta(minutes=kw.pop("minute", 0)),
        **kw,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultsStore:
    """A plain run (no search) and a search run: baseline and SPEC measured everywhere
    (SPEC failed at c=32), S4 measured to c=8 then skipped, three variants not launched."""
    store = ResultsStore(tmp_path_factory.mktemp("results"))
    write(store, sweep_rows(PLAIN_RUN))
    rows = sweep_rows(SEARCH_RUN)
    for row in rows:
        if row["variant"] == SPEC and row["concurrency"] == 32:
            row.update(status="failed", output_throughput=None, error="server died (exit 137)")
    for c in LEVELS:
        if c in S4_RATIO:
            rows.append(chain_row(SEARCH_RUN, 4, c, baseline_tput(c) * S4_RATIO[c]))
        else:
            skipped = chain_row(SEARCH_RUN, 4, c, None, status="skipped")
            skipped.update(error=f"skipped: {SKIP_REASON}", completed=0)
            rows.append(skipped)
    write(store, rows)
    for variant, record in HOLDS.items():
        store.write_phases(SEARCH_RUN, variant, "gpu-host", record)
    store.write_run(
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": SEARCH_RUN,
            "sweep_kind": "grid-sweep",
            "status": "completed",
            "started_at": T0,
            "ended_at": T0 + timedelta(hours=1),
            "search_stop": STOP,
            "phases": json.dumps(store.read_phases(SEARCH_RUN)),
        }
    )
    # Before launch: SPEC predicted at 0.965x its measurement at c=1 (inside its interval),
    # +20% at c=2 with an interval that misses; exact elsewhere. S4: exact.
    spec = []
    for c in LEVELS:
        mid = spec_tput(c) * {1: 0.965, 2: 1.2}.get(c, 1.0)
        spec.append(prediction("before_launch", SPEC, c, mid, mid * 0.9, mid * 1.05, minute=1))
    store.write_predictions(SEARCH_RUN, "gpu-host", SPEC, spec)
    s4 = []
    for c in LEVELS:
        mid = baseline_tput(c) * S4_RATIO.get(c, 0.5)
        s4.append(prediction("before_launch", S4, c, mid, mid * 0.95, mid * 1.05, minute=2))
    store.write_predictions(SEARCH_RUN, "gpu-host", S4, s4)
    final = []
    for variant in ("baseline", SPEC, S4):
        for c in LEVELS:
            final.append(
                prediction("final", variant, c, 1.0, 0.9, 1.1, launched=True, reason="launched")
            )
    for variant, steps, topk, draft, ratio in NOT_LAUNCHED:
        reason = f"predicted at most {ratio:.2f}x of the best at every level"
        for c in LEVELS:
            r = ratio if c == 1 else ratio - 0.1  # its best level is c=1
            mid = best_measured(c) * r
            final.append(
                prediction(
                    "final", variant, c, mid, mid * 0.9, best_measured(c) * (r + 0.04),
                    launched=False, reason=reason, num_steps=steps, topk=topk,
                    num_draft_tokens=draft, minute=3,
                )
            )  # fmt: skip
    store.write_predictions(SEARCH_RUN, "gpu-host", None, final)
    return store


@pytest.fixture(scope="module")
def answer(store):
    return analyze_run(store, SEARCH_RUN)


@pytest.fixture(scope="module")
def plain(store):
    return analyze_run(store, PLAIN_RUN)


def test_skipped_levels_are_neither_failures_nor_measurements(answer):
    assert answer.first.failed_levels.to_dict("records") == [
        {"variant": SPEC, "concurrency": 32, "error": "server died (exit 137)"}
    ]
    skipped = answer.first.skipped_levels
    assert skipped[["variant", "concurrency"]].values.tolist() == [[S4, 16], [S4, 32]]
    assert set(skipped["reason"]) == {SKIP_REASON}  # without the leading "skipped: "
    assert answer.search_stop == STOP
    # The answer is measured only: S4 has no throughput at c=16/32, and is never the best.
    assert answer.first.throughput[S4].dropna().index.tolist() == [1, 2, 4, 8]
    assert set(answer.first.best["best_variant"]) <= {"baseline", SPEC}
    summary = summarize(answer.stored)
    assert summary.failed_levels["variant"].tolist() == [SPEC]
    assert summary.skipped_levels["concurrency"].tolist() == [16, 32]


def test_skipped_cells_read_skipped_in_the_throughput_table(answer):
    table = throughput_table(answer.first)
    s4 = table.columns.index(S4)
    spec = table.columns.index(SPEC)
    cells = {int(row[0]): row for row in table.rows}
    assert cells[16][s4] == cells[32][s4] == "skipped"
    assert cells[8][s4] != "skipped" and cells[8][s4].startswith(f"{baseline_tput(8) * 0.6:,.1f}")
    assert cells[32][spec] == "—"  # failed: no number, and not "skipped"
    assert "skipped: the adaptive search did not measure" in table.note


def test_not_launched_closest_to_the_best_first(answer):
    table = answer.first.not_launched()
    assert table["variant"].tolist() == ["eagle3-s3-k2-d8", "eagle3-s5-k1-d6", "eagle3-s6-k1-d7"]
    top = table.iloc[0]
    assert top["best_ratio"] == pytest.approx(0.97)
    assert top["best_at"] == 1
    assert top["upper_ratio"] == pytest.approx(1.01) and top["upper_at"] == 1
    assert top["reason"] == "predicted at most 0.97x of the best at every level"
    assert (top["num_steps"], top["topk"], top["num_draft_tokens"]) == (3, 2, 8)
    view = answer.first.search
    assert view.launched_variants() == sorted(["baseline", SPEC, S4])
    assert len(view.grid_variants()) == 6


def test_prediction_check_numbers(answer):
    check = answer.first.prediction_check().set_index(["variant", "concurrency"])
    c1 = check.loc[(SPEC, 1)]
    assert c1["measured"] == pytest.approx(spec_tput(1))
    assert c1["predicted"] == pytest.approx(spec_tput(1) * 0.965)
    assert c1["error"] == pytest.approx(-0.035)
    assert c1["inside"] is True
    c2 = check.loc[(SPEC, 2)]
    assert c2["error"] == pytest.approx(0.2) and c2["inside"] is False
    failed = check.loc[(SPEC, 32)]
    assert failed["status"] == "failed" and math.isnan(failed["measured"])
    assert failed["inside"] is None
    skipped = check.loc[(S4, 16)]
    assert skipped["status"] == "skipped" and skipped["inside"] is None
    assert check.loc[(S4, 8)]["error"] == pytest.approx(0.0)
    # launch order: SPEC's prediction came first
    assert answer.first.prediction_check()["variant"].iloc[0] == SPEC
    measured, inside, median = answer.first.search.check_summary()
    assert (measured, inside) == (9, 8)  # SPEC 5 + S4 4 measured; SPEC c=2 missed
    assert median == pytest.approx(0.0)


def test_report_has_a_search_section_with_its_plot(answer, tmp_path):
    files = write_report(answer, tmp_path / "search")
    md = files.markdown.read_text()
    assert "## Search" in md
    assert "launched 3 of 6 variants (stopped: " + STOP + ")" in md
    assert "### Variants not launched, predicted (not measured)" in md
    assert "| eagle3-s3-k2-d8 | 3 | 2 | 8 | 0.97x at c=1 | 1.01x at c=1 |" in md
    assert "### Predicted before launch vs measured (the model's error)" in md
    assert f"| {SPEC} | 2 |" in md and "+20.0% | **no** |" in md
    assert "### Levels skipped by the search (not measured, not failures)" in md
    assert f"| {S4} | 16, 32 | {SKIP_REASON} |" in md
    # the not-launched table sits in the Search section, after every measured table
    assert md.index("## Search") > md.index("### Output throughput")
    assert "predictions" in files.plots
    assert "](plots/predictions.png)" in md
    html = files.html.read_text()
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 5
    assert "<h2>Search</h2>" in html and "Predicted (not measured)" in html
    failures = md[md.index("### Failures") :].split("###")[1]
    assert S4 not in failures and "c=16" not in failures  # skipped is not a failure


def test_no_search_section_without_a_search(plain, tmp_path):
    assert not plain.first.has_search and plain.predictions.empty and plain.search_stop is None
    files = write_report(plain, tmp_path / "plain")
    md = files.markdown.read_text()
    for text in ("Search", "predicted", "skipped", "not launched"):
        assert text not in md
    assert "predictions" not in files.plots
    assert "Search" not in answer_markdown(plain)
    assert search_records(plain) == []


def test_artifacts_carry_the_search_apart(answer):
    text = answer_markdown(answer)
    assert "## Search" in text and "Predicted before launch vs measured" in text
    assert all(r["status"] != "skipped" for r in level_records(answer))
    records = {r["variant"]: r for r in search_records(answer)}
    assert records[S4]["launched"] is True
    assert records[S4]["levels_skipped"] == 2 and records[S4]["levels_ok"] == 4
    assert records[SPEC]["predicted_levels_checked"] == 5
    assert records[SPEC]["predicted_inside_95"] == 4
    assert records["eagle3-s3-k2-d8"]["launched"] is False
    assert records["eagle3-s3-k2-d8"]["predicted_best_ratio"] == pytest.approx(0.97)
    assert list(records)[3] == "eagle3-s3-k2-d8"  # launched first, then by predicted ratio
    assert len({tuple(r) for r in search_records(answer)}) == 1  # every row the same columns
    assert records[S4]["predicted_best_ratio"] is None and records[S4]["reason"] == "launched"
    assert "Search" in markdown(answer, {})


def test_run_summary_markdown_lists_skipped_apart(store, answer):
    summary = summarize(answer.stored, store.read_predictions(SEARCH_RUN), STOP)
    text = summary_markdown(SEARCH_RUN, summary, {})
    failed = text[text.index("Failed levels:") : text.index("Skipped by the search")]
    assert SPEC in failed and S4 not in failed
    assert f"- {S4} c=16: {SKIP_REASON}" in text
    assert "\n\nSearch: launched 3 of 6 variants (stopped: " in text
    assert "launch to ready" not in text  # no phase records given: no cost
    summary = summarize(
        answer.stored, store.read_predictions(SEARCH_RUN), STOP, None, store.read_phases(SEARCH_RUN)
    )
    assert f"\n\nSearch: {COST}." in summary_markdown(SEARCH_RUN, summary, {})
    plain = summary_markdown(PLAIN_RUN, summarize(store.read_levels(PLAIN_RUN)), {})
    assert "search" not in plain and "Skipped" not in plain


def _search_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("search:")]


def test_the_search_states_its_launches_and_server_time_against_the_grids(answer, tmp_path):
    """Launches are the currency: the run's (every hold, a relaunch included) against the
    grid's, and the server time it held (measured) against the whole grid's (estimated)."""
    t = answer.first.search.server_time()
    assert (t.launched, t.grid, t.holds, t.relaunches, t.grid_launches) == (3, 6, 4, 1, 6)
    assert t.held_s == pytest.approx(180.0) and t.launch_s == pytest.approx(120.0)
    assert t.grid_s == pytest.approx(313.5) and t.time_share == pytest.approx(180 / 313.5)
    md = write_report(answer, tmp_path / "cost").markdown.read_text()
    assert f"{COST[0].upper()}{COST[1:]}." in md
    assert "its servers held 57% of the whole grid's estimated time" in md


def test_cli_summary_says_the_search_in_three_lines(store):
    result = runner.invoke(app, ["summary", SEARCH_RUN, "--results-dir", str(store.root)])
    assert result.exit_code == 0, result.output
    out = result.output
    lines = _search_lines(out)
    assert lines == [
        f"search: launched 3 of 6 variants (stopped: {STOP}); 3 not launched: best "
        "predicted 0.97x of the measured best (eagle3-s3-k2-d8 at c=1)",
        f"search: {COST}",
        "search: 2 levels of 1 variant skipped (not measured, not failures); predicted "
        "before launch vs measured: 8 of 9 levels inside the predicted 95% interval, "
        "median |predicted / measured - 1| 0.0%",
    ]
    assert f"failed level {SPEC} c=32" in out
    assert f"failed level {S4}" not in out
    assert f"skipped (not measured) {S4} c=16, 32: {SKIP_REASON}" in out
    # never a predicted number without the word
    for line in lines:
        if re.search(r"\d\.\d+x", line):
            assert "predicted" in line


def test_cli_report_and_plain_summary(store, tmp_path):
    result = runner.invoke(
        app, ["report", SEARCH_RUN, "--results-dir", str(store.root), "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert len(_search_lines(result.output)) == 3
    plain = runner.invoke(app, ["summary", PLAIN_RUN, "--results-dir", str(store.root)])
    assert plain.exit_code == 0, plain.output
    assert "search" not in plain.output and "skipped" not in plain.output


def test_a_search_that_launched_everything_or_stopped_early():
    """Every variant launched (budget spent), no final predictions yet: one line, no
    not-launched part; a SearchView with nothing at all is absent."""
    levels = frame(sweep_rows(SEARCH_RUN))
    best = best_per_level(levels)
    view = search_view(levels, best, None, "budget spent: max_launches 2")
    assert view.present and view.not_launched().empty and view.prediction_check().empty
    assert search_lines(view) == [
        "search: launched 2 of 2 variants (stopped: budget spent: max_launches 2)"
    ]
    assert search_tables(view) == []
    assert not search_view(levels, best).present
    assert search_lines(search_view(levels, best)) == []


def test_artifact_rows_when_the_search_launched_every_variant(answer):
    """No variant left unlaunched: the rows have no predicted ratio to sort by."""
    predictions = answer.first.predictions.assign(launched=True, reason="launched")
    first = dataclasses.replace(answer.first, predictions=predictions)
    launched_only = dataclasses.replace(answer, cells=(first,))
    rows = search_records(launched_only)
    assert rows and all(r["launched"] for r in rows)
    assert all("predicted_best_ratio" not in r for r in rows)
