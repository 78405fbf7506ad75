"""The answer per load shape: each shape's cells answered on their own, the surface over
shape x concurrency, and exports that say which shape they were built for."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from specsweep.analysis.adaptive_export import export_adaptive
from specsweep.analysis.answer import analyze
from specsweep.analysis.shapes import category_table, shape_order
from specsweep.errors import PolicyExportRefused
from tests.synthetic_levels import LEVELS, SPEC, sweep_rows

SHORT, LONG = "in512-out64", "in32768-out64"


def _rows():
    # short contexts: the default curve, crossing 1 at c = 2**4.5 ≈ 22.6; long contexts: the
    # verify's shared KV read keeps speculation ahead at every level
    short = sweep_rows("r1", input_len=512, shape=SHORT)
    long = sweep_rows(
        "r1", {c: 1.6 - 0.05 * math.log2(c) for c in LEVELS}, input_len=32768, shape=LONG
    )
    return pd.DataFrame(long + short)  # stored order says nothing


def _run(order):
    load = {"shapes": [{"input_len": int(s[2:].split("-")[0]), "output_len": 64} for s in order]}
    return {"run_id": "r1", "config": json.dumps({"load": load})}


def test_each_shape_is_answered_on_its_own_cells():
    answer = analyze(_rows(), "r1", _run([SHORT, LONG]))
    assert answer.shapes == [SHORT, LONG] and answer.multi_shape
    assert answer.first.shape == SHORT  # the first cell is the first shape's
    assert set(answer.first.levels["shape"]) == {SHORT}
    short, long = answer.cell(shape=SHORT), answer.cell(shape=LONG)
    assert short.pivots[SPEC].kind == "crosses"
    assert short.pivots[SPEC].concurrency == pytest.approx(2**4.5, rel=0.02)
    assert long.pivots[SPEC].kind == "never"
    assert long.best["best_variant"].eq(SPEC).all()


def test_the_surface_has_a_row_per_shape_and_level():
    answer = analyze(_rows(), "r1", _run([LONG, SHORT]))  # the config's order is kept
    assert answer.shapes == [LONG, SHORT]
    surface = answer.surface
    assert len(surface) == 2 * len(LEVELS)
    assert surface["shape"].drop_duplicates().tolist() == [LONG, SHORT]
    at32 = surface.set_index(["shape", "concurrency"])
    assert at32.loc[(SHORT, 32), "best_variant"] == "baseline"
    assert at32.loc[(LONG, 32), "best_variant"] == SPEC
    assert at32.loc[(LONG, 32), "speedup"] == pytest.approx(1.6 - 0.05 * 5)
    assert at32.loc[(LONG, 32), "input_len"] == 32768


def test_a_single_shape_run_is_unchanged_but_named():
    answer = analyze(pd.DataFrame(sweep_rows("r1", shape="in128-out64")), "r1")
    assert answer.first.shape == "in128-out64" and answer.shapes == ["in128-out64"]
    assert not answer.multi_shape and answer.surface.empty and len(answer.cells) == 1


def test_shapes_without_a_config_are_ordered_by_length():
    assert shape_order(_rows()) == [SHORT, LONG]


def test_the_export_is_per_shape():
    with pytest.raises(PolicyExportRefused, match="several load shapes"):
        export_adaptive(_rows())
    rows = _rows()
    export = export_adaptive(rows[rows["shape"] == LONG])
    assert export.shape == LONG
    assert export.sglang_config()["_specsweep"]["shape"] == LONG
    assert LONG in export.describe()[0]


def test_categories_pool_accept_length_and_take_speed_at_the_lowest_level():
    requests = pd.DataFrame(
        {
            "variant": [SPEC] * 4 + ["baseline"],
            "concurrency": [1, 1, 8, 1, 1],
            "shape": [SHORT] * 5,
            "category": ["code", "code", "code", "chat", "chat"],
            "error": [None] * 5,
            "tpot_ms": [5.0, 5.0, 10.0, 8.0, 10.0],
            "spec_accept_length": [3.0, 3.4, 3.2, 2.0, None],
        }
    )
    table = category_table(requests).set_index(["variant", "category"])
    assert table.loc[(SPEC, "code"), "accept_length"] == pytest.approx(3.2)
    assert table.loc[(SPEC, "code"), "decode_tok_s"] == pytest.approx(200.0)  # c=1 only
    assert table.loc[(SPEC, "code"), "requests"] == 3
    assert math.isnan(table.loc[("baseline", "chat"), "accept_length"])
