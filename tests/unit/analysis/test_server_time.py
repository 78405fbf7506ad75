"""A search's cost against its grid's on a fleet: a variant measured on two GPU kinds is
two launches, not a relaunch, and the grid would have launched every variant on both."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from specsweep.analysis.server_time import server_time
from tests.synthetic_levels import T0


def _level(variant: str, target: str, c: int, status: str = "ok") -> dict:
    start = T0 + timedelta(seconds=10 * c)
    end = start + timedelta(seconds=2)
    return {"variant": variant, "target": target, "concurrency": c, "shape": None,
            "status": status, "started_at": start, "ended_at": end}  # fmt: skip


def test_two_gpu_kinds_are_two_launches_per_variant_and_the_grid_has_both():
    levels = pd.DataFrame(
        [_level(v, t, c) for v in ("baseline", "s2") for t in ("h100", "h200") for c in (1, 8)]
    )
    hold = {"held_from_unix": 0.0, "held_until_unix": 30.0, "launch_to_ready_s": 20.0}
    phases = {f"{v}@{t}": hold for v in ("baseline", "s2") for t in ("h100", "h200")}
    t = server_time(phases, levels, ["baseline", "s2", "s4", "s6"])
    assert t is not None
    assert (t.launched, t.grid, t.holds, t.relaunches, t.grid_launches) == (2, 4, 4, 0, 8)
    assert t.launch_share == pytest.approx(0.5)
    assert t.held_s == pytest.approx(120.0) and t.launch_s == pytest.approx(80.0)
    # two variants not launched: the median overhead (30 - 2 x 2 s) + the two levels (2 s each)
    assert t.grid_s == pytest.approx(120.0 + 2 * (26.0 + 4.0))


def test_no_phase_records_no_cost_and_an_unmeasured_level_leaves_the_grid_unestimated():
    levels = pd.DataFrame([_level("baseline", "a", 1), _level("s2", "a", 8, status="failed")])
    assert server_time({}, levels, ["baseline", "s2"]) is None
    hold = {"held_from_unix": 0.0, "held_until_unix": 30.0}
    t = server_time({"baseline": hold, "s2": hold}, levels, ["baseline", "s2", "s4"])
    assert t is not None and t.grid_s is None  # no level at c=8 measured: no basis
    assert t.held_s == pytest.approx(60.0)
