"""The search compares cells (shape, concurrency): a variant measured at one shape only is
not done, and the bar to clear is each cell's own best."""

from __future__ import annotations

import pandas as pd

from specsweep.config import SearchSpec
from specsweep.config.plan import step_sweep_variants
from specsweep.config.sweep import StepSweep
from specsweep.search.planner import RunSoFar, best_measured, next_step
from tests.synthetic_levels import level_row

SHORT, LONG = "in512-out64", "in32768-out64"
GRID = step_sweep_variants(
    StepSweep(algorithm="EAGLE3", draft_model_path="d", num_steps=[1, 3, 5], topk=1)
)


def _levels(rows):
    return pd.DataFrame(rows)


def test_the_bar_is_per_cell():
    rows = [
        level_row("r", "baseline", 8, 800.0, shape=SHORT),
        level_row("r", "baseline", 8, 300.0, shape=LONG),
        level_row("r", GRID[1].label, 8, 700.0, shape=SHORT, is_baseline=False),
        level_row("r", GRID[1].label, 8, 450.0, shape=LONG, is_baseline=False),
    ]
    best = best_measured(_levels(rows))
    assert best[(SHORT, 8)] == (800.0, "baseline")
    assert best[(LONG, 8)] == (450.0, GRID[1].label)


def test_a_variant_measured_at_one_shape_only_is_resumed():
    base, s1 = GRID[0], GRID[1]
    rows = [
        level_row("r", base.label, c, 100.0 * c, shape=s) for s in (SHORT, LONG) for c in (1, 8)
    ] + [level_row("r", s1.label, c, 120.0 * c, shape=SHORT, is_baseline=False) for c in (1, 8)]
    so_far = RunSoFar(_levels(rows), None, [(s1.label, "h", {"held_from_unix": 1.0})])
    spec = SearchSpec(mode="adaptive")
    step = next_step(spec, GRID, [1, 8], so_far, {base.label}, shapes=[SHORT, LONG])
    assert step.launch == s1 and step.why.startswith("resumed")
    # with one shape listed the same rows are complete: the search goes on to the seeds
    step = next_step(spec, GRID, [1, 8], so_far, {base.label}, shapes=[SHORT])
    assert step.launch != s1
