"""What measuring more asks for next (analysis/sequential.py): typed steps from the rows."""

from __future__ import annotations

from specsweep.analysis.sequential import MeasureMore, Settled, plan_more
from tests.synthetic_levels import baseline_tput, chain_row, frame, level_row

RUN = "r"
S2 = "eagle3-s2-k1-d3"


def _with(rows: list[dict], half: dict[str, float]) -> list[dict]:
    for r in rows:
        h = half[r["variant"]]
        r["output_throughput_lo"] = r["output_throughput"] * (1 - h)
        r["output_throughput_hi"] = r["output_throughput"] * (1 + h)
    return rows


def _plan(rows, variant, passes=None, seconds=0.5, spent=0.0, budget=20.0):
    levels = {r["concurrency"] for r in rows}
    return plan_more(
        frame(rows),
        variant,
        passes=passes or dict.fromkeys(levels, 1),
        pass_seconds=dict.fromkeys(levels, seconds),
        spent_s=spent,
        budget_s=budget,
    )


def test_nothing_more_when_the_budget_is_off():
    rows = [level_row(RUN, "baseline", 1, baseline_tput(1))]
    step = _plan(_with(rows, {"baseline": 0.1}), "baseline", budget=0)
    assert isinstance(step, Settled) and "off" in step.reason


def _baseline_at(halves: dict[int, float]) -> list[dict]:
    rows = [level_row(RUN, "baseline", c, baseline_tput(c)) for c in halves]
    for r in rows:
        h = halves[r["concurrency"]]
        r["output_throughput_lo"] = r["output_throughput"] * (1 - h)
        r["output_throughput_hi"] = r["output_throughput"] * (1 + h)
    return rows


def _plan_seconds(rows, variant, passes, seconds, spent=0.0, budget=20.0):
    return plan_more(frame(rows), variant, passes=passes, pass_seconds=seconds,
                     spent_s=spent, budget_s=budget)  # fmt: skip


def test_the_baseline_is_measured_to_twice_the_margin_cheapest_level_first():
    """±3% in one pass needs about 2 more (1 s), ±5% in two about 11 more (5.5 s): c=1 goes
    first, though c=8 is the wider; then c=8, its two passes doubled."""
    rows = _baseline_at({1: 0.03, 8: 0.05})
    step = _plan(rows, "baseline", passes={1: 1, 8: 2})
    assert step == MeasureMore(1, 1, step.reason) and "±3.0% at c=1" in step.reason
    rows = _baseline_at({1: 0.015, 8: 0.05})
    step = _plan(rows, "baseline", passes={1: 2, 8: 2})
    assert step == MeasureMore(8, 2, step.reason)  # doubles c=8's two passes
    narrow = _with([level_row(RUN, "baseline", c, baseline_tput(c)) for c in (1, 8)],
                   {"baseline": 0.015})  # fmt: skip
    assert isinstance(_plan(narrow, "baseline"), Settled)


def test_a_level_no_budget_can_settle_does_not_starve_one_a_pass_can():
    """The decision-flow test's failure on a loaded machine: c=16's interval is wide with
    drift (±8% in one pass: 16 passes would leave it near ±2%), c=1 is ±3.9%. Seconds per
    pass decide too: the cheaper level to settle goes first, the slower to settle after."""
    rows = _baseline_at({1: 0.039, 16: 0.08})
    step = _plan_seconds(rows, "baseline", {1: 1, 16: 1}, {1: 1.0, 16: 0.5})
    assert step == MeasureMore(1, 1, step.reason)
    # where no number of passes can bring a level within the margin, the widest is left last
    rows = _baseline_at({1: 0.039, 16: 0.2})
    assert _plan_seconds(rows, "baseline", {1: 1, 16: 1}, {1: 5.0, 16: 0.1}).concurrency == 1
    # among levels none can settle, the widest first
    rows = _baseline_at({1: 0.15, 16: 0.2})
    assert _plan_seconds(rows, "baseline", {1: 1, 16: 1}, {1: 0.1, 16: 0.1}).concurrency == 16
    # a level measured on another launch (no passes here) is never asked for
    rows = _baseline_at({1: 0.039, 16: 0.08})
    assert _plan_seconds(rows, "baseline", {16: 1}, {16: 0.5}).concurrency == 16


def test_an_open_level_asks_for_more_of_the_side_whose_server_is_up():
    t = baseline_tput(4)
    rows = [level_row(RUN, "baseline", 4, t), chain_row(RUN, 2, 4, t * 1.04)]
    step = _plan(_with(rows, {"baseline": 0.01, S2: 0.05}), S2)
    assert isinstance(step, MeasureMore) and step.concurrency == 4
    assert "leads baseline" in step.reason
    # its own side already much narrower than the baseline's: measuring it would not help
    quiet = _with(
        [level_row(RUN, "baseline", 4, t), chain_row(RUN, 2, 4, t * 1.04)],
        {"baseline": 0.05, S2: 0.01},
    )
    assert isinstance(_plan(quiet, S2), Settled)


def test_a_spent_budget_settles_and_says_so():
    t = baseline_tput(4)
    rows = _with([level_row(RUN, "baseline", 4, t), chain_row(RUN, 2, 4, t * 1.04)],
                 {"baseline": 0.01, S2: 0.05})  # fmt: skip
    step = _plan(rows, S2, spent=19.9, seconds=1.0)
    assert isinstance(step, Settled) and "spent" in step.reason


def test_precision_spends_only_its_share_and_leaves_the_rest_for_open_decisions():
    """The baseline's and an incumbent's precision is foresight: past PRECISION_SHARE of
    the budget it stops, while a decision that is open may still use the rest."""
    wide = _with([level_row(RUN, "baseline", 8, baseline_tput(8))], {"baseline": 0.05})
    assert isinstance(_plan(wide, "baseline", spent=9.0, seconds=0.5), MeasureMore)
    settled = _plan(wide, "baseline", spent=9.8, seconds=0.5)  # 10 s of 20 is its share
    assert isinstance(settled, Settled) and "share for precision" in settled.reason
    t = baseline_tput(8)
    incumbent = _with([level_row(RUN, "baseline", 8, t), chain_row(RUN, 2, 8, t * 1.3)],
                      {"baseline": 0.01, S2: 0.05})  # fmt: skip
    assert isinstance(_plan(incumbent, S2, spent=9.0), MeasureMore)  # the choice, ±5%
    assert "share for precision" in _plan(incumbent, S2, spent=9.8).reason
    open_ = _with([level_row(RUN, "baseline", 8, t), chain_row(RUN, 2, 8, t * 1.04)],
                  {"baseline": 0.01, S2: 0.05})  # fmt: skip
    step = _plan(open_, S2, spent=15.0)
    assert isinstance(step, MeasureMore) and "leads baseline" in step.reason


def test_an_inconclusive_pivot_asks_for_more_of_its_unsure_level():
    """No decision is open (the baseline is the choice at c=4, by more than the margin
    nowhere), but where the chain stops paying is: its ratio's interval holds 1 at c=4.
    More of the chain at c=4 places the pivot; the share is precision's (no config hangs
    on it), and a level whose baseline side is the wide one is left alone."""
    t = {c: baseline_tput(c) for c in (1, 4, 16)}
    ratio = {1: 1.3, 4: 0.99, 16: 0.8}
    half = {1: 0.015, 4: 0.05, 16: 0.015}
    rows = [level_row(RUN, "baseline", c, t[c]) for c in t]
    rows += [chain_row(RUN, 2, c, t[c] * ratio[c]) for c in t]
    for r in rows:
        h = 0.01 if r["variant"] == "baseline" else half[r["concurrency"]]
        r["output_throughput_lo"] = r["output_throughput"] * (1 - h)
        r["output_throughput_hi"] = r["output_throughput"] * (1 + h)
    step = _plan(rows, S2)
    assert isinstance(step, MeasureMore) and step.concurrency == 4, step
    assert step.reason == (
        "eagle3-s2-k1-d3's pivot is unplaced: its ratio to the baseline holds 1 in its 95% "
        "interval at c=4, its side measured ±5.0%"
    )
    assert "share for pivots" in _plan(rows, S2, spent=9.9).reason  # 10 s of 20: the share
    for r in rows:  # the baseline's side is the wide one at c=4
        if r["concurrency"] == 4:
            h = 0.2 if r["variant"] == "baseline" else 0.05
            r["output_throughput_lo"] = r["output_throughput"] * (1 - h)
            r["output_throughput_hi"] = r["output_throughput"] * (1 + h)
    assert isinstance(_plan(rows, S2), Settled)
