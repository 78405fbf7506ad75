"""A run over several load shapes in every view: the report's surface picture and per-shape
sections, the answer artifact, the run summary, the per-category table; and a single-shape
run that only says its shape and workload."""

from __future__ import annotations

import base64
import logging
import math
import re

import pandas as pd
import pytest

from specsweep.analysis import analyze_run
from specsweep.analysis.answer import analyze
from specsweep.analysis.summary import summarize
from specsweep.report.markdown import summary_markdown
from specsweep.report.plots import FIGURES
from specsweep.report.render import answer_markdown, level_records, write_report
from specsweep.report.shapes import shape_lines, surface_grid
from specsweep.report.tables import all_tables, category_table
from specsweep.results.schema import SCHEMA_VERSION
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import LEVELS, SPEC, frame, sweep_rows

RUN = "20261105T000000Z-shapes"
ONE = "20261104T000000Z-oneshape"
PNG = b"\x89PNG\r\n\x1a\n"
# SPEC / baseline = 1 + 0.1 * (k - log2 c): it crosses 1 at c = 2**k. The longer the
# context, the earlier speculation stops paying.
PIVOT_AT = {"in512-out256": 4.5, "in4096-out256": 2.5, "in16384-out256": 0.5}
LOAD = {"workload": "builtin", "endpoint": "chat"}


def shape_rows(run_id: str, shapes: dict[str, float] = PIVOT_AT) -> list[dict]:
    rows = []
    for shape, k in shapes.items():
        ins, outs = (int(x) for x in re.findall(r"\d+", shape))
        ratio = {c: 1 + 0.1 * (k - math.log2(c)) for c in LEVELS}
        rows += sweep_rows(run_id, ratio, input_len=ins, output_len=outs, shape=shape, **LOAD)
    return rows


def request_rows(run_id: str) -> list[dict]:
    """Two categories per shape: code accepts more draft tokens than chat."""
    rows = []
    for shape in PIVOT_AT:
        for variant in ("baseline", SPEC):
            for c in (1, 2):
                for i, category in enumerate(["chat", "code"] * 3):
                    spec = variant == SPEC
                    accept = (3.2 if category == "code" else 2.1) if spec else None
                    tpot = (5.0 if category == "code" else 8.0) if spec else 10.0
                    rows.append(
                        {
                            "schema_version": SCHEMA_VERSION, "run_id": run_id,
                            "sweep_kind": "matrix_sweep", "target": "gpu-host",
                            "variant": variant, "concurrency": c, "shape": shape, "repeat": 0,
                            "index": i, "tpot_ms": tpot * c, "spec_accept_length": accept,
                            "category": category, "error": None,
                        }
                    )  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultsStore:
    store = ResultsStore(tmp_path_factory.mktemp("results"))
    for row in shape_rows(RUN):
        store.write_level(row, by_shape=True)
    requests = pd.DataFrame(request_rows(RUN))
    for (variant, c, shape), group in requests.groupby(["variant", "concurrency", "shape"]):
        store.write_requests(RUN, variant, c, "gpu-host", group.to_dict("records"), shape)
    for row in shape_rows(ONE, {"in512-out256": 4.5}):
        store.write_level(row)
    return store


@pytest.fixture(scope="module")
def answer(store):
    return analyze_run(store, RUN)


def section(text: str, start: str, end: str = "\n### ") -> str:
    """The text from `start` up to the next `end` after it."""
    tail = text[text.index(start) + len(start) :]
    return tail[: tail.index(end)] if end in tail else tail


def test_each_shape_is_answered_on_its_own(answer):
    assert answer.shapes == list(PIVOT_AT) and answer.first.shape == "in512-out256"
    pivots = {a.shape: a.pivots[SPEC].concurrency for a in answer.cells}
    assert pivots == pytest.approx({s: 2**k for s, k in PIVOT_AT.items()}, rel=0.01)


def test_report_draws_the_surface_and_answers_each_shape(answer, tmp_path):
    files = write_report(answer, tmp_path / "out")
    html = files.html.read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 5  # the first shape's four, and the surface
    alt, data = images[-1]
    assert alt.startswith("Best variant and its speedup per load shape")
    assert base64.b64decode(data).startswith(PNG)
    assert files.plots["surface"].read_bytes().startswith(PNG)
    assert html.index("<h2>Tables at in512-out256 (the first load shape)</h2>") < html.index(
        "<h2>Load shapes</h2>"
    )
    md = files.markdown.read_text()
    assert "**At in512-out256: Deploy SGLang adaptive tiers 1:[2] 24:[0] (EAGLE3 chains)." in md
    assert "](plots/surface.png)" in md
    assert "This run measured 3 load shapes (in512-out256, in4096-out256, in16384-out256)" in md
    assert "### Pivot points at in512-out256, builtin prompts via chat" in md  # the top
    shapes = md[md.index("## Load shapes") :]
    surface = section(shapes, "### Per load shape and concurrency")
    row = next(line for line in surface.splitlines() if line.startswith("| in4096-out256 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == ["s2-k1-d3 1.25x", "s2-k1-d3 1.15x", "s2-k1-d3 1.05x",
                         "baseline 1.00x", "baseline 1.00x", "baseline 1.00x"]  # fmt: skip
    for shape, k in PIVOT_AT.items():
        mine = section(shapes, f"### {shape}\n", "\n### ")
        assert f"{shape}, builtin prompts via chat." in mine
        assert f"#### Best variant per level, and how sure at {shape}" in mine
        assert f"pivot at c≈{2**k:.3g}" in mine
        assert f"#### Adaptive tiers exported from this run at {shape}" in mine
        assert f"Measured at shape {shape}: " in mine  # the export says its shape
    short = section(shapes, "### in16384-out256\n", "\n## ")
    # c=1 gains clearly at this shape too: kept, not diluted by the other levels (issue 27)
    assert "Deploy SGLang adaptive tiers 1:[2] 2:[0]" in short


def test_surface_cells_mark_near_ties_and_intervals():
    surface = pd.DataFrame(
        [
            ["in512-out256", 512, 256, 1, "eagle3-s3-k1-d4", "eagle3-s2-k1-d3", 900.0, 1.30,
             1.26, 1.34, True],
            ["in512-out256", 512, 256, 8, "baseline", "baseline", 4000.0, 1.0, 1.0, 1.0, False],
            ["in4096-out256", 4096, 256, 1, "eagle3-s2-k1-d3", "eagle3-s2-k1-d3", 700.0, 1.1,
             None, None, False],
        ],
        columns=["shape", "input_len", "output_len", "concurrency", "best_variant", "choice",
                 "best_throughput", "speedup", "speedup_lo", "speedup_hi", "near_tie"],
    )  # fmt: skip
    grid = surface_grid(surface, ["in512-out256", "in4096-out256"], "baseline")
    assert grid.levels == [1, 8] and grid.prefix == "eagle3-"
    # the simplest of the tie, with the best's speedup named as the best's
    assert grid.cell_text("in512-out256", 1) == "≈ s2-k1-d3 (best s3-k1-d4 1.30x ±3.1%)"
    assert grid.cell_text("in512-out256", 8) == "baseline 1.00x"
    assert grid.cell_text("in4096-out256", 1) == "s2-k1-d3 1.10x"
    assert grid.cell_text("in4096-out256", 8) == "—"  # not measured


def test_the_categories_table_per_shape(answer):
    top = category_table(answer.first)
    assert top is not None and top.title.startswith("Per prompt category at in512-out256")
    assert top.columns == ["variant", "at c", "chat", "code"]
    rows = {r[0]: r for r in top.rows}
    assert rows[SPEC][1] == "1"  # the variant's lowest level
    assert rows[SPEC][2] == "2.10 · 125 tok/s (n=6)" and rows[SPEC][3].startswith("3.20 · 200")
    assert rows["baseline"][2].startswith("— · 100 tok/s")
    other = category_table(answer.cell(shape="in4096-out256"))
    assert other is not None and "at in4096-out256" in other.title


def test_no_categories_no_table(store):
    one = analyze_run(store, ONE)
    assert category_table(one.first) is None
    assert all("category" not in t.title for t in all_tables(one))


def test_answer_artifact_has_the_surface_and_each_shapes_policy(answer):
    uri = "data:image/png;base64,iVBORw0KGgo="
    md = answer_markdown(answer, {"surface": uri})
    assert "Load: in512-out256, builtin prompts via chat." in md
    shapes = md[md.index("### Load shapes") :]
    assert shapes.startswith(f"### Load shapes\n\n![{FIGURES['surface'][0]}]({uri})\n")
    assert "| in16384-out256 | s2-k1-d3 1.05x | baseline 1.00x |" in shapes
    assert "- **in4096-out256**: Deploy SGLang adaptive tiers" in shapes
    assert f"  - pivots: {SPEC}: pivot at c≈5.66" in shapes
    assert "![" not in answer_markdown(answer)  # no picture where none is given
    records = level_records(answer)
    assert len(records) == 3 * 2 * len(LEVELS)
    assert [r["shape"] for r in records[:: 2 * len(LEVELS)]] == list(PIVOT_AT)
    assert shape_lines(answer)[2].startswith("in4096-out256 (builtin prompts via chat): Deploy")


def test_publish_answer_returns_every_shape(store, tmp_path, monkeypatch):
    import specsweep.tasks.answer as task

    published = {}
    for name in ("create_table_artifact", "create_markdown_artifact", "create_link_artifact"):
        monkeypatch.setattr(task, name, lambda *a, _n=name, **kw: published.setdefault(_n, a))
    monkeypatch.setattr(task, "get_run_logger", lambda: logging.getLogger("test"))
    out = task.publish_answer.fn(store.root, RUN, report_dir=tmp_path / "rep")
    assert out["shape"] == "in512-out256" and out["shapes"] == list(PIVOT_AT)
    assert out["workload"] == "builtin" and out["load"].startswith("Load: in512-out256")
    assert out["by_shape"]["in16384-out256"]["pivots"][SPEC] == "pivot at c≈1.41"
    assert out["surface_plot"].endswith("plots/surface.png")
    assert "### Load shapes" in published["create_markdown_artifact"][0]


def test_run_summary_markdown_splits_by_shape(store):
    text = summary_markdown(RUN, summarize(store.read_levels(RUN)), {})
    assert "Load: 3 shapes (in512-out256, in4096-out256, in16384-out256), builtin prompts" in text
    assert "| in4096-out256 | s2-k1-d3 1.25x | s2-k1-d3 1.15x | s2-k1-d3 1.05x | baseline" in text
    for shape, k in PIVOT_AT.items():
        mine = section(text, f"### {shape}\n")
        assert f"Best per level at {shape}, builtin prompts via chat:" in mine
        assert f"- {SPEC}: pivot at c≈{2**k:.3g}" in mine


def test_a_single_shape_run_only_says_its_shape_and_workload(store, tmp_path):
    one = analyze_run(store, ONE)
    assert not one.multi_shape and one.first.shape == "in512-out256"
    files = write_report(one, tmp_path / "one")
    html, md = files.html.read_text(), files.markdown.read_text()
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 4
    assert "Load shapes" not in html and "surface" not in files.plots
    assert "Load: in512-out256, builtin prompts via chat." in md
    at = " at in512-out256, builtin prompts via chat"
    assert f"### Best variant per level, and how sure{at}" in md
    assert "| load shapes | in512-out256 |" in md and "| workload | builtin |" in md
    text = summary_markdown(ONE, summarize(store.read_levels(ONE)), {})
    assert "Load: in512-out256, builtin prompts via chat." in text
    assert "Best per level at in512-out256, builtin prompts via chat:" in text


def test_rows_from_before_load_shapes_say_nothing_new():
    old = analyze(frame(sweep_rows("20261101T000000Z-old")), "20261101T000000Z-old")
    assert old.first.shape is None and old.shapes == []
    md = answer_markdown(old)
    assert "Load:" not in md and "### Pivot points\n" in md
