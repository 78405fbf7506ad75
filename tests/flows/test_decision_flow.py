"""Issue 27 through the real step-sweep flow, Prefect and the simulator: two load shapes,
measuring more while each server is up, and one decision that every view renders."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prefect import flow
from typer.testing import CliRunner

from specsweep.analysis.answer import analyze_run
from specsweep.analysis.decision import HEADLINE_COLUMNS
from specsweep.analysis.sequential import MeasureMore, Settled
from specsweep.cli import app
from specsweep.config.file import parse_config
from specsweep.config.load import Shape
from specsweep.flows.benchmark_variant import measure_to_decide
from specsweep.flows.step_sweep import step_sweep
from specsweep.loadgen.calibration import DriftBands
from specsweep.report.decision_view import decision_rows
from specsweep.report.render import answer_markdown
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def test_a_sweep_measures_more_where_it_decides_and_every_view_agrees(tmp_path, port):
    data = sim_config_data(
        tmp_path,
        port,
        load={"input_len": [64, 256], "output_len": 32, "concurrency": [1, 16],
              "decide_budget_s": 30, "calibrate_drift": True},
    )  # fmt: skip
    # simulated time at a fifth of real time: the answer is the model's, not the CPU's (at a
    # twentieth a loaded machine starves the servers and flattens speculation's lead)
    data["server"]["env"]["SPECSWEEP_SIM_TIME_SCALE"] = "0.2"
    config = parse_config(data)
    run_id = step_sweep(config)["run_id"]
    store = ResultsStore(config.results_dir)
    levels = store.read_levels(run_id)
    # the baseline is the reference of every ratio: its levels are measured to ±2% or more
    # passes were pooled into them (the row says how many)
    # every level's interval carries the drift the run's calibration measured (the product's
    # default path; the other flow tests skip the calibration to save its passes)
    assert set(levels["throughput_drift_source"]) == {"calibrated"}
    # levels 1 and 16: calibrated at c=4 (the nearest to c=1) and at the top level, c=16
    bands = DriftBands.from_json(store.read_drift(run_id, levels["target"].iloc[0]))
    assert [p.concurrency for p in bands.points] == [4, 16]
    for c, drift in zip(levels["concurrency"], levels["throughput_drift"], strict=True):
        assert drift == bands.drift_at(c).sd > 0, (c, drift)
    base = levels[levels["variant"] == "baseline"]
    half = (base["output_throughput_hi"] - base["output_throughput_lo"]) / 2
    assert ((half / base["output_throughput"] <= 0.02) | (base["repeats"] > 1)).all()
    spent = sum(p.get("decide_s", 0.0) for _, _, p in store.read_phase_files(run_id))
    assert spent <= 30 + 10  # the budget, and the one step that may start just under it

    answer = analyze_run(store, run_id)
    cells = answer.cells
    assert [c.decision.shape for c in cells] == ["in64-out32", "in256-out32"]
    md = answer_markdown(answer)
    out = CliRunner().invoke(app, ["summary", run_id, "--results-dir", str(store.root)]).output
    for one in cells:
        d = one.decision
        lines = d.headline()
        assert len(lines) == 3 and all(len(line) <= HEADLINE_COLUMNS for line in lines)
        best = one.best.set_index("concurrency")
        assert {c: best.at[c, "choice"] for c in d.choice_at()} == d.choice_at()
        if one.export is not None:
            bands = {c: b.variant for b in one.export.bands for c in b.levels}
            assert bands == d.deploy.runs_at()
        # speculation pays at c=1 and not at c=16 on the simulator: both sides are clear
        assert d.deploy.runs_at()[1] != "baseline" and d.deploy.runs_at()[16] == "baseline"
        assert d.decided, d.verdict_line()
    first = cells[0].decision
    assert out.splitlines()[:3] == first.headline()
    for row in decision_rows(first):
        assert "| " + " | ".join(row) + " |" in md
    assert "inconclusive" not in md and "inconclusive" not in out

    # a resume finds every cell written (extra passes included): nothing is relaunched
    files = sorted((store.root / "levels" / run_id).rglob("*.parquet"))
    stamps = [f.stat().st_mtime_ns for f in files]
    step_sweep(config, run_id=run_id)
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert len(store.read_levels(run_id)) == len(levels)


class _TwoShapeServer:
    """A server with two shapes measured on its launch, each wanting three more steps, and
    a run budget for four: the planner's answers as `VariantServer.next_to_decide` gives
    them (the budget is the run's, shared by every shape), and which shape measured when."""

    label = "baseline"
    load = SimpleNamespace(multi_shape=True)

    def __init__(self) -> None:
        self.wanted = {"in64-out32": 3, "in256-out32": 3}
        self.budget = 4
        self.order: list[str] = []

    def cell_name(self, shape: Shape, concurrency: int) -> str:
        return f"{shape.label} c={concurrency}"

    def next_to_decide(self, shape: Shape) -> MeasureMore | Settled:
        if not self.budget:
            return Settled("load.decide_budget_s spent")
        if not self.wanted[shape.label]:
            return Settled("every level within ±2%")
        return MeasureMore(16, 1, "the reference of every ratio measured ±16%")

    def measure_more(self, step: MeasureMore, shape: Shape) -> dict:
        self.budget -= 1
        self.wanted[shape.label] -= 1
        self.order.append(shape.label)
        return {"shape": shape.label, "concurrency": step.concurrency, "repeats": 2,
                "output_throughput": 1.0, "output_throughput_lo": 0.9,
                "output_throughput_hi": 1.1}  # fmt: skip


def test_the_shapes_of_one_launch_take_turns_at_the_budget():
    """A shape measured to the end before the next spent the run's precision share on its
    own levels: on a loaded machine the first shape's baseline pooled 16 passes and the
    second's kept ±16% (the flow test above, three workers on two cores)."""
    server = _TwoShapeServer()
    shapes = [Shape(input_len=64, output_len=32), Shape(input_len=256, output_len=32)]

    @flow
    def decide() -> list[dict]:
        return measure_to_decide(server, shapes)  # type: ignore[arg-type]

    rows = decide()
    assert server.order == ["in64-out32", "in256-out32"] * 2
    assert [r["shape"] for r in rows] == server.order
