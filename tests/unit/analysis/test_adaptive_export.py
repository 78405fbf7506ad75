"""Policy export on curves with known crossings: tiers, edges, near-ties and refusals.

Throughput is baseline_tput(c) x a ratio per step count, so every crossing can be
worked out by hand in log2(c): between levels 8 and 16 a ratio T1/T3 going 0.95 -> 1.05
crosses 1 half-way, at c = 2**3.5 ≈ 11.3, whose next captured CUDA-graph size is 12.
"""

from __future__ import annotations

import json
import math

import pytest

from specsweep.analysis.adaptive_export import (
    decode_cuda_graph_batch_sizes,
    export_adaptive,
    pad_batch,
    route,
)
from specsweep.config.adaptive import AdaptiveSpec
from specsweep.errors import PolicyExportRefused
from tests.synthetic_levels import (
    adaptive_frame,
    adaptive_row,
    baseline_tput,
    chain_label,
    chain_row,
    level_row,
    static_rows,
)

RUN = "20261201T000000Z-abcdef"
S3, S1 = chain_label(3), chain_label(1)
# Wins low (3 steps), 1 step in the middle, loses high.
R3 = {1: 1.6, 2: 1.5, 4: 1.35, 8: 1.2, 16: 1.0, 32: 0.8, 64: 0.7}
R1 = {1: 1.3, 2: 1.28, 4: 1.22, 8: 1.14, 16: 1.05, 32: 0.9, 64: 0.8}


def export(ratios, **kw):
    rows = static_rows(RUN, ratios, **kw.pop("row_kw", {}))
    return export_adaptive(adaptive_frame(rows), **kw)


# ---- CUDA-graph padding and routing ----------------------------------------------------


def test_capture_sizes_follow_sglangs_speculative_list():
    sizes = decode_cuda_graph_batch_sizes(256)
    assert sizes[:10] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]
    assert [s for s in sizes if 30 <= s <= 80] == [30, 32, 40, 44, 48, 52, 56, 60, 64, 72, 80]
    assert sizes[-1] == 256 and 264 not in sizes
    assert decode_cuda_graph_batch_sizes(100)[-3:] == [88, 96, 100]  # max_bs itself is captured
    assert decode_cuda_graph_batch_sizes(300)[-3:] == [272, 288, 300]
    assert decode_cuda_graph_batch_sizes(5) == [1, 2, 3, 4, 5]


def test_routing_pads_then_takes_the_closest_key_at_or_below():
    cap = decode_cuda_graph_batch_sizes(256)
    assert pad_batch(9, cap) == 10
    assert route([1, 8, 12], 9, cap) == 8  # 9 -> 10 -> tier 8
    assert route([1, 8, 10], 9, cap) == 10  # padded into the tier at 10
    assert pad_batch(33, cap) == 40  # sglang captures 32 then 40 (no 34..38)
    assert route([1, 8, 36], 33, cap) == 36  # 33 -> 40 -> tier 36
    assert route([1, 8, 40], 33, cap) == 40
    assert route([4, 8], 2, cap) == 4  # below every key: the lowest tier (as sglang)


def test_batches_above_max_bs_are_not_padded():
    cap = decode_cuda_graph_batch_sizes(100)
    assert pad_batch(150, cap) == 150
    assert route([1, 100, 120], 110, cap) == 100
    assert route([1, 100, 120], 130, cap) == 120
    assert route([1, 8], 7, None) == 1  # without CUDA graphs nothing is padded


# ---- the export --------------------------------------------------------------------------


def test_wins_low_loses_high_edges_at_the_crossings_snapped_to_capture_sizes(tmp_path):
    exp = export({3: R3, 1: R1})
    assert exp.tiers == {1: 3, 12: 1, 20: 0}
    e1, e2 = exp.edges
    # T1/T3: 0.95 at c=8, 1.05 at c=16 -> half-way in log2 c.
    assert (e1.low, e1.high, e1.crosses) == (8, 16, True)
    assert e1.crossing == pytest.approx(2**3.5)
    assert e1.key == 12  # not 16, the first level after: the curves cross at 11.3
    # T0/T1: 1/1.05 at c=16, 1/0.9 at c=32 -> 0.3 of the way: c = 2**4.3 ≈ 19.7.
    assert e2.crossing == pytest.approx(2**4.3) and e2.key == 20
    assert [(b.levels, b.steps, b.variant) for b in exp.bands] == [
        ((1, 2, 4, 8), 3, S3),
        ((16,), 1, S1),
        ((32, 64), 0, "baseline"),
    ]
    assert exp.bands[0].throughput[0] == pytest.approx(baseline_tput(1) * 1.6)
    assert exp.near_ties == () and exp.run_id == RUN
    assert exp.built_from == ("baseline", S1, S3)
    assert exp.family.algorithm == "EAGLE3" and exp.family.draft_model_path == "draft/eagle3"
    lines = exp.describe()
    assert "batch 1-11: 3 steps (eagle3-s3-k1-d4 best at c=1..8)" in lines
    assert any(ln.startswith("batch 12-19: 1 step") and "cross at c≈11.3" in ln for ln in lines)
    assert any(ln.startswith("batch 20+: no speculation") for ln in lines)
    assert any("above c=64" in n and "extrapolated" in n for n in exp.notes)
    assert any("max_running_requests not recorded" in n for n in exp.notes)
    # The file sglang reads: digit keys plus a comment key it ignores; specsweep reads it back.
    cfg = exp.sglang_config()
    text = json.dumps(cfg)
    assert {k: v for k, v in cfg.items() if k.isdigit()} == {
        "1": {"candidate_steps": [3]},
        "12": {"candidate_steps": [1]},
        "20": {"candidate_steps": [0]},
    }
    meta = cfg["_specsweep"]
    assert meta["run_id"] == RUN and meta["built_from"] == ["baseline", S1, S3]
    assert "padded" in meta["note"] and [b["levels"] for b in meta["bands"]][1] == [16]
    path = tmp_path / "tiers.json"
    path.write_text(text)
    spec = AdaptiveSpec(file=str(path))
    assert spec.tier_steps == {1: [3], 12: [1], 20: [0]}
    assert exp.adaptive_spec().config_json() == spec.config_json()
    assert list(exp.choices()["steps"]) == [3, 3, 3, 3, 1, 0, 0]


def test_never_loses_has_no_zero_tier():
    r3 = {1: 1.6, 2: 1.5, 4: 1.4, 8: 1.3, 16: 1.2, 32: 1.1, 64: 1.05}
    r1 = {1: 1.3, 2: 1.28, 4: 1.25, 8: 1.22, 16: 1.14, 32: 1.155, 64: 1.15}
    exp = export({3: r3, 1: r1})
    # T1/T3: 0.95 at 16, 1.05 at 32 -> c = 2**4.5 ≈ 22.6 -> captured 24.
    assert exp.tiers == {1: 3, 24: 1}
    assert exp.edges[0].crossing == pytest.approx(2**4.5)


@pytest.mark.parametrize("ratio", [0.9, 1.005])
def test_speculation_that_never_wins_is_refused(ratio):
    r = {c: ratio - 0.01 * i for i, c in enumerate([1, 2, 4, 8])}
    with pytest.raises(PolicyExportRefused, match=r"speculation never wins.*nothing to export"):
        export({2: r})


def _with_intervals(rows, half):
    """Each row's output throughput with a 95% interval of ±half (relative)."""
    for r in rows:
        r["output_throughput_lo"] = r["output_throughput"] * (1 - half)
        r["output_throughput_hi"] = r["output_throughput"] * (1 + half)
    return rows


def test_near_ties_go_to_fewer_steps_and_the_edge_goes_where_the_curves_come_closest():
    r3 = {1: 1.5, 2: 1.4, 4: 1.3, 8: 1.15, 16: 0.9, 32: 0.8}
    r1 = {1: 1.2, 2: 1.18, 4: 1.15, 8: 1.145, 16: 1.006, 32: 0.9}
    exp = export({3: r3, 1: r1})
    assert exp.tiers == {1: 3, 8: 1, 16: 0}
    t8, t16 = exp.near_ties
    assert (t8.concurrency, t8.best, t8.chosen_steps) == (8, S3, 1)
    assert t8.judgment.status == "tie" and not t8.open
    assert t8.judgment.rival_ratio.value == pytest.approx(1.15 / 1.145)
    assert (t16.concurrency, t16.best, t16.chosen, t16.chosen_steps) == (16, S1, "baseline", 0)
    assert t16.judgment.margin == 0.01
    assert t16.describe() == "at c=16 eagle3-s1-k1-d2 and baseline tie within 1%: no speculation"
    # The ratios do not cross between the levels: the edge is the end nearest a tie.
    assert [(e.crosses, e.crossing, e.key) for e in exp.edges] == [
        (False, 8.0, 8),
        (False, 16.0, 16),
    ]
    assert "do not cross" in exp.edges[1].how
    assert exp.bands[1].tied == (8,)


def test_the_levels_intervals_decide_ties_as_everywhere_else():
    r1 = {1: 1.3, 2: 1.2, 4: 1.1, 8: 1.02, 16: 0.9}
    without = export({1: r1})
    assert without.tiers == {1: 1, 10: 0}  # 2% at c=8 is beyond the 1% tie margin
    assert without.near_ties == ()
    q8, q16 = 1 / 1.02, 1 / 0.9  # T0/T1 at c=8 and c=16: they cross at c≈8.9 -> size 10
    assert without.edges[0].crossing == pytest.approx(2 ** (3 + (1 - q8) / (q16 - q8)))
    rows = _with_intervals(static_rows(RUN, {1: r1}), 0.01)
    within = export_adaptive(adaptive_frame(rows))
    assert within.tiers == {1: 1, 8: 0}  # ±1% each side: 2% at c=8 is not real: ties
    (tie,) = within.near_ties
    assert tie.concurrency == 8 and tie.open  # measured beyond the margin, not surely
    assert "interval is" in tie.describe() and "until measured more" in tie.describe()


def test_a_level_too_wide_to_decide_is_exported_and_named_with_its_width():
    """s1 is 30% below s3 at c=1 but measured ±40%: the rule cannot tell them apart, so
    the simpler runs, and the export names the level with the interval's width instead of
    refusing or setting it to 0 silently."""
    rows = []
    for c in (1, 8):
        rows += _with_intervals([level_row(RUN, "baseline", c, baseline_tput(c))], 0.01)
        rows += _with_intervals(
            [chain_row(RUN, 3, c, baseline_tput(c) * (1.6 if c == 1 else 0.8))], 0.01
        )
        rows += _with_intervals(
            [chain_row(RUN, 1, c, baseline_tput(c) * (1.12 if c == 1 else 0.7))], 0.4
        )
    exp = export_adaptive(adaptive_frame(rows))
    assert exp.tiers[1] == 1
    (tie,) = exp.near_ties
    assert tie.concurrency == 1 and tie.open and tie.best == S3
    assert "95% interval is" in tie.describe()


def test_no_baseline_is_refused():
    rows = [r for r in static_rows(RUN, {3: R3}) if r["variant"] != "baseline"]
    with pytest.raises(PolicyExportRefused, match="no baseline"):
        export_adaptive(adaptive_frame(rows))


def test_only_trees_are_refused_saying_adaptive_runs_chains_only():
    rows = [level_row(RUN, "baseline", c, baseline_tput(c)) for c in R3]
    rows += [chain_row(RUN, 3, c, baseline_tput(c) * R3[c], topk=4) for c in R3]
    with pytest.raises(
        PolicyExportRefused, match=r"only tree variants \(topk > 1: eagle3-s3-k4-d8"
    ):
        export_adaptive(adaptive_frame(rows))


def test_several_chain_families_are_refused_until_variants_picks_one():
    rows = static_rows(RUN, {3: R3, 1: R1})
    rows += [
        chain_row(RUN, 2, c, baseline_tput(c) * 1.7, variant="other-s2", draft_model_path="b")
        for c in R3
    ]
    with pytest.raises(PolicyExportRefused) as err:
        export_adaptive(adaptive_frame(rows))
    assert "several chain families" in str(err.value) and "other-s2" in str(err.value)
    assert "`variants`" in str(err.value)
    exp = export_adaptive(adaptive_frame(rows), variants=[S3, S1])
    assert exp.tiers == {1: 3, 12: 1, 20: 0}
    assert any("not used" in n and "other-s2" in n for n in exp.notes)
    with pytest.raises(PolicyExportRefused, match="were not measured"):
        export_adaptive(adaptive_frame(rows), variants=["nope"])


def test_the_same_step_count_twice_is_refused():
    rows = static_rows(RUN, {3: R3})
    rows += [chain_row(RUN, 3, c, baseline_tput(c), variant="eagle3-s3-again") for c in R3]
    with pytest.raises(PolicyExportRefused, match="one step count twice"):
        export_adaptive(adaptive_frame(rows))


def test_a_tree_that_beats_the_chosen_steps_is_reported_not_exported():
    rows = static_rows(RUN, {3: R3, 1: R1})
    rows += [chain_row(RUN, 3, c, baseline_tput(c) * R3[c] * (1.06 if c == 1 else 0.9), topk=4)
             for c in R3]  # fmt: skip
    exp = export_adaptive(adaptive_frame(rows))
    assert exp.tiers == {1: 3, 12: 1, 20: 0}
    (win,) = exp.tree_wins
    assert (win.variant, win.concurrency) == ("eagle3-s3-k4-d8", 1)
    assert win.gain == pytest.approx(0.06)
    assert any(
        "cannot express eagle3-s3-k4-d8, which measured +6.0% at c=1" in n for n in exp.notes
    )


def test_adaptive_variants_in_the_run_are_not_export_candidates():
    rows = static_rows(RUN, {3: R3, 1: R1})
    rows += [adaptive_row(RUN, "eagle3-adaptive-x", c, 1e6, tiers={1: [3]}) for c in R3]
    assert export_adaptive(adaptive_frame(rows)).tiers == {1: 3, 12: 1, 20: 0}


def test_files_without_the_adaptive_columns_still_export():
    df = adaptive_frame(static_rows(RUN, {3: R3, 1: R1}))
    old = df.drop(columns=["adaptive", "adaptive_config", "adaptive_steps_share"])
    assert export_adaptive(old).tiers == {1: 3, 12: 1, 20: 0}


def test_a_crossing_inside_the_lower_levels_graph_size_starts_at_the_next_size():
    # Levels 9 and 16: T1/T3 = 0.98 at c=9, crossing at c≈9.5, whose captured size 10 is
    # also where c=9 runs (measured: 3 steps best), so the tier starts at 12.
    lv = [1, 2, 4, 9, 16, 32]
    t = (math.log2(9.5) - math.log2(9)) / (4 - math.log2(9))
    rho16 = 0.98 + 0.02 / t
    r3 = {1: 1.5, 2: 1.4, 4: 1.3, 9: 1.2, 16: 0.95, 32: 0.8}
    r1 = {1: 1.2, 2: 1.15, 4: 1.1, 9: 1.2 * 0.98, 16: 0.95 * rho16, 32: 0.9}
    exp = export({3: r3, 1: r1}, row_kw={"levels": lv})
    edge = exp.edges[0]
    assert edge.crossing == pytest.approx(9.5) and edge.crosses
    assert edge.key == 12 and "inside c=9's CUDA-graph size 10" in edge.how
    assert route(exp.tiers, 9, exp.capture) == 1  # c=9 still runs what was measured best


def test_two_edges_snapping_to_one_key_keep_the_later_choice():
    # c=9 and c=10 both run CUDA-graph size 10: 1 step was best at 9, no speculation at 10.
    lv = [1, 2, 4, 8, 9, 10, 16, 32]
    r3 = {1: 1.5, 2: 1.4, 4: 1.3, 8: 1.2, 9: 1.05, 10: 0.9, 16: 0.8, 32: 0.7}
    r1 = {1: 1.2, 2: 1.18, 4: 1.15, 8: 1.1, 9: 1.15, 10: 0.95, 16: 0.9, 32: 0.8}
    exp = export({3: r3, 1: r1}, row_kw={"levels": lv})
    assert [e.key for e in exp.edges] == [10, 10]
    assert exp.tiers == {1: 3, 10: 0}
    assert any("band at c=9 (eagle3-s1-k1-d2) vanished" in n for n in exp.notes)
    assert "both run CUDA-graph size 10" in exp.edges[1].how


def test_max_bs_comes_from_max_running_requests_and_lowest_level_is_extrapolated():
    ratios = {
        3: {c: r for c, r in R3.items() if c >= 4},
        1: {c: r for c, r in R1.items() if c >= 4},
    }
    exp = export(ratios, row_kw={"max_running_requests": 64})
    assert exp.max_bs == 64 and exp.capture[-1] == 64
    assert exp.tiers == {1: 3, 12: 1, 20: 0}
    assert any("below c=4" in n and "extrapolated" in n for n in exp.notes)
    assert export(ratios, max_bs=16).max_bs == 16


# ---- steps 0 inside the engine (a pinned-0 variant) -------------------------------------

PINNED = {1: [0]}
STEPS0 = 0.83  # the engine at steps 0: 17% below a server without speculation


def _with_pinned_zero(ratios, zero=STEPS0):
    rows = static_rows(RUN, ratios)
    levels = sorted({c for r in ratios.values() for c in r})
    rows += [  # recorded as specsweep launches it: SGLANG_LOG_MS=1 in its env
        adaptive_row(RUN, "eagle3-adaptive-steps0", c, baseline_tput(c) * zero, tiers=PINNED,
                     env='{"SGLANG_LOG_MS": "1"}')
        for c in levels
    ]  # fmt: skip
    return adaptive_frame(rows)


def test_a_chain_that_beats_steps_0_in_the_engine_keeps_its_tier():
    """At c=8 the baseline beats 2 steps (0.90), but a tier [0] would run the engine's steps 0
    (0.83): measured, the export keeps 2 steps there; unmeasured, it drops to [0]."""
    ratios = {2: {1: 1.4, 4: 1.2, 8: 0.9, 16: 0.7}}
    plain = export_adaptive(adaptive_frame(static_rows(RUN, ratios)))
    assert plain.tiers[1] == 2 and max(plain.tiers) <= 8 and plain.tiers[max(plain.tiers)] == 0
    assert any("no pinned-0 variant measured" in n for n in plain.notes)
    engine = export_adaptive(_with_pinned_zero(ratios))
    key = max(engine.tiers)
    assert engine.tiers[key] == 0 and 8 < key <= 16  # 2 steps up to the crossing with steps 0
    # T0/T2 goes 0.83/0.90 -> 0.83/0.70 from c=8 to 16: 1 at 2**(3 + 0.0778/0.2635) ≈ 9.8
    r8, r16 = 0.83 / 0.9, 0.83 / 0.7
    assert engine.edges[-1].crossing == pytest.approx(2 ** (3 + (1 - r8) / (r16 - r8)))
    assert key == 10
    assert any("measured by eagle3-adaptive-steps0" in n for n in engine.notes)
    assert "eagle3-adaptive-steps0" in engine.built_from


def test_beating_steps_0_in_the_engine_is_not_beating_a_server_without_speculation():
    # a weak drafter: 1 step beats the engine's steps 0 at c=1 but never the plain baseline
    with pytest.raises(PolicyExportRefused, match="speculation never wins in this run"):
        export_adaptive(_with_pinned_zero({1: {1: 0.87, 8: 0.6}}))
