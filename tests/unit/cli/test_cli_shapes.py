"""The CLI on a run over several load shapes: `specsweep report` prints the surface and each
shape's policy and pivots; `specsweep policy export --shape` exports one shape's tiers and
refuses a shape the run did not measure."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import LEVELS, SPEC, sweep_rows

runner = CliRunner()
RUN = "20261105T000000Z-shapes"
OLD = "20261101T000000Z-noshape"
# SPEC / baseline = 1 + 0.1 * (k - log2 c): speculation stops paying at c = 2**k
PIVOT_AT = {"in512-out256": 4.5, "in4096-out256": 2.5, "in16384-out256": 0.5}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> str:
    store = ResultsStore(tmp_path_factory.mktemp("results"))
    for shape, k in PIVOT_AT.items():
        ins = int(shape.split("-")[0].removeprefix("in"))
        ratio = {c: 1 + 0.1 * (k - math.log2(c)) for c in LEVELS}
        for row in sweep_rows(RUN, ratio, input_len=ins, output_len=256, shape=shape,
                              workload="random-ids", endpoint="generate"):  # fmt: skip
            store.write_level(row, by_shape=True)
    for row in sweep_rows(OLD):  # written before load shapes: no shape, in128-out64
        store.write_level(row)
    return str(store.root)


def test_report_prints_the_surface_and_each_shapes_pivot(results, tmp_path):
    args = ["report", RUN, "--results-dir", results, "--out", str(tmp_path / "rep")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("At in512-out256: Deploy SGLang adaptive tiers 1:[2] 24:[0]")
    assert "Load: in512-out256, random-ids prompts via generate." in out
    assert "Exportable at in512-out256 as SGLang adaptive" in out
    assert f"policy export {RUN} --shape in512-out256" in out
    table = out[out.index("Per load shape") : out.index("Each cell:")]
    rows = [line for line in table.splitlines() if line.startswith("│ in")]
    assert [r.split("│")[1].strip() for r in rows] == list(PIVOT_AT)  # the run's order
    header = next(line for line in table.splitlines() if "c=1" in line)
    assert [h.strip() for h in header.strip("┃").split("┃")][1:] == [f"c={c}" for c in LEVELS]
    cells = [c.strip() for c in rows[1].split("│")[2:-1]]
    assert cells[:4] == ["s2-k1-d3", "s2-k1-d3", "s2-k1-d3", "baseline"]  # first of two lines
    for shape, k in PIVOT_AT.items():
        assert f"  pivots at {shape}: {SPEC}: pivot at c≈{2**k:.3g}" in out
    assert (
        "in16384-out256 (random-ids prompts via generate): Deploy SGLang adaptive tiers 1:[2] 2:[0]"
        in out
    )


def _export(results: str, *extra: str):
    return runner.invoke(app, ["policy", "export", RUN, "--results-dir", results, *extra])


@pytest.mark.parametrize(
    ("shape", "last_key"),
    [("in4096-out256", "6"), ("in16384-out256", "2"), (None, "24")],  # None: the first shape
)
def test_policy_export_builds_the_tiers_of_the_shape_asked_for(results, shape, last_key):
    result = _export(results, *(["--shape", shape] if shape else []))
    assert result.exit_code == 0, result.output
    tiers = json.loads(result.stdout)
    picked = shape or "in512-out256"
    assert tiers["_specsweep"]["shape"] == picked
    assert max((k for k in tiers if k.isdigit()), key=int) == last_key
    assert tiers[last_key] == {"candidate_steps": [0]}
    assert f"load shape {picked} ({list(PIVOT_AT).index(picked) + 1} of 3;" in result.stderr
    assert f"shape {picked}; max_bs" in result.stderr  # the tiers say their shape


def test_policy_export_refuses_a_shape_the_run_did_not_measure(results):
    result = _export(results, "--shape", "in9-out9")
    assert result.exit_code == 2
    assert "--shape in9-out9: run" in result.stderr
    assert "its shapes: in512-out256, in4096-out256, in16384-out256" in result.stderr


def test_a_run_from_before_load_shapes_has_its_own_shape(results):
    args = ["policy", "export", OLD, "--results-dir", results]
    result = runner.invoke(app, [*args, "--shape", "in128-out64"])
    assert result.exit_code == 0, result.output
    assert "load shape" not in result.stderr  # one shape: nothing to choose between
    refused = runner.invoke(app, [*args, "--shape", "in512-out256"])
    assert refused.exit_code == 2 and "its shapes: in128-out64" in refused.stderr


def test_summary_prints_each_shape_on_its_own_then_the_surface(results):
    result = runner.invoke(app, ["summary", RUN, "--results-dir", results, "--wide"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "load: 3 load shapes, random-ids prompts via generate" in out
    for shape, k in PIVOT_AT.items():
        mine = out[out.index(f"run {RUN} at {shape}: output throughput") :]
        assert f"{SPEC}: pivot at c≈{2**k:.3g}" in mine.split("output throughput")[1]
    assert out.index("Per load shape") > out.index(f"run {RUN} at in16384-out256")
