"""Another workload is another series: tonight's real prompts are not judged against
nights of random ids."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from specsweep.analysis.regression import judge_run
from tests.synthetic_levels import T0, sweep_rows


def test_a_new_workload_starts_its_own_history():
    nights = []
    for n in range(4):  # older nights: no workload recorded (schema < 5): random ids
        nights += sweep_rows(f"n{n}", started_at=T0 + timedelta(days=n))
    nights += sweep_rows("tonight", started_at=T0 + timedelta(days=5), workload="builtin")
    rows = pd.DataFrame(nights)
    tonight = rows["run_id"] == "tonight"
    rows.loc[tonight, "output_throughput"] *= 1.3  # real text accepts more: not a change
    report = judge_run(rows, "tonight")
    verdicts = report.verdicts
    assert set(verdicts["workload"]) == {"builtin"}
    assert report.improvements.empty and report.regressions.empty
    assert set(verdicts["verdict"]) == {"new"}  # its own history starts tonight
    same = judge_run(rows.assign(workload=None), "tonight")  # one workload: a clear change
    assert not same.improvements.empty
