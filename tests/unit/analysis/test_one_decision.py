"""Issue 27: one question, one answer. Runs with near-ties, open levels and several load
shapes; every view (the decision, the best-per-level table, the tier export, the
policy, the CLI summary, the answer artifact, the report) names the same config at
every level, and the headline says what to deploy in at most three lines of 100 columns."""

from __future__ import annotations

import dataclasses
import re

import pytest
from typer.testing import CliRunner

from specsweep.analysis.answer import CellAnswer, RunAnswer, analyze
from specsweep.analysis.decision import HEADLINE_COLUMNS
from specsweep.analysis.tie_rule import Option, judge_level
from specsweep.cli import app
from specsweep.report.decision_view import decision_rows
from specsweep.report.evidence import pivot_line
from specsweep.report.render import answer_markdown, write_report
from specsweep.report.shapes import pivot_summary
from specsweep.results.intervals import Interval
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import baseline_tput, chain_row, frame, level_row

RUN = "20261203T000000Z-onedec"
LEVELS = [1, 2, 4, 8, 16]
# per shape: steps -> ratio to the baseline per level, and the rows' relative half-width
SHAPES = {
    # s1 and s2 tie at c=1 (within 1%); s2 wins clearly at c=2; c=4 is open (+3% ±4%)
    "in512-out256": {1: [1.40, 1.25, 1.05, 0.9, 0.8], 2: [1.405, 1.35, 1.08, 0.85, 0.7]},
    # speculation clear at c=1 only, diluted by four levels: still kept
    "in16384-out256": {1: [1.08, 0.96, 0.9, 0.85, 0.8], 2: [1.06, 0.9, 0.85, 0.8, 0.7]},
}
HALF = {1: 0.003, 2: 0.003, 4: 0.02, 8: 0.005, 16: 0.005}


def _rows() -> list[dict]:
    rows = []
    for shape, ratios in SHAPES.items():
        kw = {"shape": shape, "input_len": int(re.findall(r"\d+", shape)[0]), "output_len": 256}
        for i, c in enumerate(LEVELS):
            t = baseline_tput(c)
            rows.append(level_row(RUN, "baseline", c, t, **kw))
            for steps, r in ratios.items():
                rows.append(chain_row(RUN, steps, c, t * r[i], **kw))
    for r in rows:
        h = HALF[r["concurrency"]]
        r["output_throughput_lo"] = r["output_throughput"] * (1 - h)
        r["output_throughput_hi"] = r["output_throughput"] * (1 + h)
    return rows


@pytest.fixture(scope="module")
def answer():
    return analyze(frame(_rows()), RUN)


def test_the_tie_rule_is_per_level_and_names_ties_and_open_levels():
    def opt(name: str, v: float, h: float, k: int) -> Option:
        return Option(name, Interval(v, v * (1 - h), v * (1 + h)), (k,))

    tie = judge_level(2, [opt("s1", 100, 0.002, 1), opt("s2", 100.5, 0.002, 2)], 0.01)
    assert (tie.choice, tie.status) == ("s1", "tie")
    assert tie.sentence() == "s1 and s2 tie at c=2 within 1%: run s1"
    clear = judge_level(1, [opt("s1", 100, 0.002, 1), opt("s2", 110, 0.002, 2)], 0.01)
    assert (clear.choice, clear.status) == ("s2", "clear")
    opened = judge_level(4, [opt("base", 100, 0.02, 0), opt("s2", 103, 0.02, 2)], 0.01)
    assert (opened.choice, opened.status, opened.rival) == ("base", "open", "s2")


def test_every_view_names_the_same_config_at_every_level(answer, tmp_path):
    cells = answer.cells
    assert [c.decision.shape for c in cells] == list(SHAPES)
    for one in cells:
        d = one.decision
        best = one.best.set_index("concurrency")
        choice = d.choice_at()
        assert {c: best.at[c, "choice"] for c in choice} == choice  # the table's choice
        runs = d.deploy.runs_at()
        assert set(runs) == set(LEVELS)
        if one.export is not None:  # the tiers run each level's step count
            bands = {c: b.variant for b in one.export.bands for c in b.levels}
            assert bands == runs
        rows = {int(r[0]): r[1] for r in decision_rows(d)}
        assert rows == runs  # the rendered table
        for c, j in ((j.concurrency, j) for j in d.judgments):
            if j.choice == "baseline":
                assert runs[c] == "baseline"  # nothing speculates where no speculation won
    first = cells[0].decision
    assert first.choice_at()[1] == "eagle3-s1-k1-d2"  # tie: the simpler runs
    assert first.choice_at()[2] == "eagle3-s2-k1-d3"  # a clear win is kept
    assert first.judgment(4).status == "open" and not first.decided
    second = cells[1].decision
    assert second.deploy.runs_at()[1] != "baseline"  # c=1's clear gain is not diluted away
    md = answer_markdown(answer)
    for line in first.headline():
        assert line in md
    for r in decision_rows(first):
        assert "| " + " | ".join(r) + " |" in md
    report = write_report(answer, tmp_path / "rep").markdown.read_text()
    assert first.headline()[0] in report
    for one in cells:  # the pivots the views render are the decision's, computed once
        assert one.pivots is one.decision.pivots and one.decision.pivots
        for variant, pivot in one.decision.pivots.items():
            assert f"{variant}: {pivot_line(pivot)}" in pivot_summary(one)


def test_the_headline_fits_three_lines_of_100_columns_and_the_cli_shows_it(answer, tmp_path):
    for one in answer.cells:
        lines = one.decision.headline()
        assert len(lines) == 3
        assert all(len(line) <= HEADLINE_COLUMNS for line in lines)
        assert lines[0].startswith(f"At {one.decision.shape}: Deploy ")
        assert lines[1].startswith("Measured vs no speculation: ")
        assert lines[2].startswith(("Decided", "Not decided: measure more at c="))
    store = ResultsStore(tmp_path / "results")
    for row in _rows():
        store.write_level(row, by_shape=True)
    result = CliRunner().invoke(app, ["summary", RUN, "--results-dir", str(store.root)])
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    assert out[:3] == answer.cells[0].decision.headline()
    assert max(len(line) for line in out) <= 100  # the deploy command too, at its arguments
    assert "inconclusive" not in result.output


def test_two_gpu_kinds_are_two_cells_and_every_view_agrees_on_each(tmp_path):
    from specsweep.analysis.answer import analyze_run
    from specsweep.analysis.baselines import REFERENCE, HostRole, plan_row

    store = ResultsStore(tmp_path / "results")
    kinds = {"gpu-a": ("NVIDIA H200", 1.0), "gpu-b": ("NVIDIA A100", 0.6)}
    for target, (_, speed) in kinds.items():
        for i, c in enumerate(LEVELS):
            t = baseline_tput(c) * speed
            rows = [level_row(RUN, "baseline", c, t, target=target)]
            for steps, r in SHAPES["in512-out256"].items():
                rows.append(chain_row(RUN, steps, c, t * r[i], target=target))
            for row in rows:
                h = HALF[c]
                row["output_throughput_lo"] = row["output_throughput"] * (1 - h)
                row["output_throughput_hi"] = row["output_throughput"] * (1 + h)
                store.write_level(row)
    for order, (target, (gpu, _)) in enumerate(kinds.items()):
        facts = {"gpu_name": gpu, "gpu_count": 1}
        role = HostRole(REFERENCE, target)
        store.write_host_plan(plan_row(RUN, target, "per_gpu_kind", role, order, facts))
    answer = analyze_run(store, RUN)
    cells = answer.cells
    assert [c.decision.gpu_kind for c in cells] == ["1x NVIDIA H200", "1x NVIDIA A100"]
    assert len(answer.decisions.cells) == 2
    for one in cells:
        d = one.decision
        assert d.headline()[0].startswith(f"At {d.gpu_kind}: Deploy ")
        best = one.best.set_index("concurrency")
        assert {c: best.at[c, "choice"] for c in d.choice_at()} == d.choice_at()
        if one.export is not None:
            assert {c: b.variant for b in one.export.bands for c in b.levels} == (
                d.deploy.runs_at()
            )
    md = answer_markdown(answer)
    for one in cells:
        assert one.decision.headline()[0] in md  # the other kind's headline is said too


def test_two_gpu_kinds_by_two_shapes_are_four_flat_cells(tmp_path):
    """The run's answer is flat: one cell per (GPU kind, shape) in the run's order (kinds by
    their first host, shapes by the config), and no cell holds another answer."""
    from specsweep.analysis.answer import analyze_run
    from specsweep.analysis.baselines import REFERENCE, HostRole, plan_row

    store = ResultsStore(tmp_path / "results")
    kinds = {"gpu-a": "NVIDIA H200", "gpu-b": "NVIDIA A100"}
    for target in kinds:
        for row in _rows():
            store.write_level(row | {"target": target}, by_shape=True)
    for order, (target, gpu) in enumerate(kinds.items()):
        facts = {"gpu_name": gpu, "gpu_count": 1}
        role = HostRole(REFERENCE, target)
        store.write_host_plan(plan_row(RUN, target, "per_gpu_kind", role, order, facts))
    answer = analyze_run(store, RUN)
    h200, a100 = "1x NVIDIA H200", "1x NVIDIA A100"
    wanted = [(k, s) for k in (h200, a100) for s in SHAPES]
    assert [(c.gpu_kind, c.shape) for c in answer.cells] == wanted
    assert answer.gpu_kinds == [h200, a100] and answer.shapes == list(SHAPES)
    assert answer.first is answer.cells[0] and answer.cells_of(a100) == answer.cells[2:]
    assert answer.cell(gpu_kind=a100, shape="in16384-out256") is answer.cells[3]
    assert [(d.gpu_kind, d.shape) for d in answer.decisions.cells] == wanted
    assert [d.label for d in answer.decisions.cells] == [f"{k}, {s}" for k, s in wanted]
    for one in answer.cells:
        assert one.decision is answer.decisions.cell(one.gpu_kind, one.shape)
        assert set(one.levels["shape"]) == {one.shape}
        for f in dataclasses.fields(one):
            value = getattr(one, f.name)
            assert not isinstance(value, CellAnswer | RunAnswer), f.name
            if isinstance(value, dict | list | tuple):
                items = value.values() if isinstance(value, dict) else value
                assert not any(isinstance(v, CellAnswer | RunAnswer) for v in items), f.name
