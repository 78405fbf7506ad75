"""The report warns when the search model's intervals are too wide to rule anything out
(issue 29, item 3): "53 of 57 levels inside the predicted 95% interval" read as a
calibrated model when the intervals were ±75-114%, the model knowing nothing."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from specsweep.analysis import analyze_run
from specsweep.report.render import write_report
from specsweep.report.search import search_lines
from specsweep.results.schema import SCHEMA_VERSION
from specsweep.results.store import ResultsStore
from specsweep.search.informative import TOO_WIDE, median_half_width, uninformative
from tests.synthetic_levels import LEVELS, SPEC, T0, baseline_tput, sweep_rows, write

RUN = "20261103T000000Z-wide"


def store_with(tmp_path, spread: float) -> ResultsStore:
    """A search run whose SPEC was predicted before launch at its measured throughput,
    with a 95% interval of ±spread."""
    store = ResultsStore(tmp_path / "results")
    rows = sweep_rows(RUN)
    write(store, rows)
    measured = {r["concurrency"]: r["output_throughput"] for r in rows if r["variant"] == SPEC}
    preds = [
        {
            "schema_version": SCHEMA_VERSION, "run_id": RUN, "target": "gpu-host",
            "stage": "before_launch", "variant": SPEC, "concurrency": c,
            "predicted_output_throughput": baseline_tput(c),  # the baseline's, as it was
            "predicted_lo": baseline_tput(c) * (1 - spread),
            "predicted_hi": baseline_tput(c) * (1 + spread),
            "fit_on": '["baseline"]', "made_at": T0 + timedelta(minutes=1),
        }
        for c in LEVELS
        if c in measured
    ]  # fmt: skip
    store.write_predictions(RUN, "gpu-host", SPEC, preds)
    return store


def test_intervals_too_wide_to_rule_anything_out_are_said_so(tmp_path):
    answer = analyze_run(store_with(tmp_path, 0.9), RUN)
    lines = search_lines(answer.first.search)
    text = " ".join(lines)
    assert "6 of 6 levels inside the predicted 95% interval" in text
    assert "warning: the model's 95% intervals are ±90% wide (median)" in text
    assert "too wide to rule any variant out" in text
    md = write_report(answer, tmp_path / "report").markdown.read_text()
    assert "too wide to rule any variant out" in md


def test_narrow_intervals_get_no_warning(tmp_path):
    answer = analyze_run(store_with(tmp_path, 0.5), RUN)
    assert "too wide" not in " ".join(search_lines(answer.first.search))


def test_the_width_is_the_median_relative_half_width():
    mid = pd.Series([100.0, 100.0, 100.0, 0.0])
    lo = pd.Series([90.0, 20.0, 0.0, 0.0])
    hi = pd.Series([110.0, 180.0, 200.0, 1.0])
    assert median_half_width(mid, lo, hi) == pytest.approx(0.8)  # the 0 prediction left out
    assert uninformative(mid, lo, hi) is not None and TOO_WIDE < 0.8
    assert uninformative(mid.iloc[:1], lo.iloc[:1], hi.iloc[:1]) is None
    assert uninformative(mid, lo * float("nan"), hi) is None  # no interval: nothing to say
