"""Nightly verdicts on a synthetic history: stable nights, a real 8% drop, noise that is not one."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from pydantic import ValidationError

from specsweep.analysis import RegressionPolicy, compare_runs, judge_run, judge_stored_run
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import SPEC, baseline_tput, frame, level_row, night, write

QUIET = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01]  # +-1% night to night
NOISY = [1.0, 1.06, 0.95, 1.04, 0.97, 1.05, 0.94]  # +-5% night to night


def nights(multipliers: list[float], levels=(1, 8), **kw) -> list[dict]:
    rows = []
    for i, m in enumerate(multipliers):
        run_id, start = night(i)
        for c in levels:
            rows.append(
                level_row(run_id, "baseline", c, baseline_tput(c) * m, started_at=start, **kw)
            )
            rows.append(
                level_row(run_id, SPEC, c, baseline_tput(c) * 1.2 * m, started_at=start, **kw)
            )
    return rows


def tonight(spec_c8: float = 1.0, i: int = 7, **kw) -> tuple[str, list[dict]]:
    """Tonight's run: everything at its usual level, SPEC at c=8 multiplied by spec_c8."""
    run_id, start = night(i)
    rows = []
    for c in (1, 8):
        m = spec_c8 if c == 8 else 1.0
        rows.append(level_row(run_id, "baseline", c, baseline_tput(c), started_at=start, **kw))
        rows.append(level_row(run_id, SPEC, c, baseline_tput(c) * 1.2 * m, started_at=start, **kw))
    return run_id, rows


def verdict(report, variant: str, c: int, metric: str = "output_throughput") -> str:
    v = report.verdicts
    sel = v[(v["variant"] == variant) & (v["concurrency"] == c) & (v["metric"] == metric)]
    return sel["verdict"].item()


def test_stable_nights_then_a_real_8pct_drop_is_a_regression_naming_the_metric():
    run_id, rows = tonight(spec_c8=0.92)
    report = judge_run(frame(nights(QUIET) + rows), run_id)
    assert report.regressed
    assert verdict(report, SPEC, 8) == "regression"
    assert verdict(report, SPEC, 1) == "ok"
    assert verdict(report, "baseline", 8) == "ok"
    row = report.regressions.iloc[0]
    assert row["change"] == pytest.approx(0.92 / 1.0 - 1)  # the median of QUIET is 1.0
    assert row["n_history"] == 7
    message = report.message()
    assert f"{SPEC} c=8 (gpu-host) output_throughput" in message
    assert "-8.0%" in message
    assert report.event_payload()["metrics"] == ["output_throughput"]


def test_the_same_drop_inside_a_noisy_history_is_noise():
    run_id, rows = tonight(spec_c8=0.92)
    report = judge_run(frame(nights(NOISY) + rows), run_id)
    assert verdict(report, SPEC, 8) == "ok"
    assert not report.regressed


def test_a_noisy_night_below_the_minimum_change_never_pages():
    # 3% down against a +-1% history: many MADs, but under the 5% floor.
    run_id, rows = tonight(spec_c8=0.97)
    report = judge_run(frame(nights(QUIET) + rows), run_id)
    assert verdict(report, SPEC, 8) == "ok"
    assert report.verdicts.loc[report.verdicts["variant"] == SPEC, "robust_z"].abs().max() > 4


def test_tonights_own_repeat_spread_widens_the_noise():
    run_id, rows = tonight(spec_c8=0.92, repeats=3, cv=0.05)
    report = judge_run(frame(nights(QUIET) + rows), run_id)
    assert verdict(report, SPEC, 8) == "ok"  # 8% < 4 x 5% run-to-run spread


def test_an_improvement_is_reported_not_failed():
    run_id, rows = tonight(spec_c8=1.15)
    report = judge_run(frame(nights(QUIET) + rows), run_id)
    assert verdict(report, SPEC, 8) == "improvement"
    assert not report.regressed
    assert "improved:" in report.message()


def test_latency_regression_and_its_environment_change():
    run_id, rows = tonight(sglang_version="0.5.10")
    for r in rows:
        if r["variant"] == SPEC and r["concurrency"] == 8:
            r["itl_ms_p50"] *= 1.3
    report = judge_run(frame(nights(QUIET) + rows), run_id)
    assert verdict(report, SPEC, 8, "itl_ms_p50") == "regression"
    assert verdict(report, SPEC, 8, "output_throughput") == "ok"
    assert report.environment["sglang_version"] == ("0.5.9", "0.5.10")
    assert "sglang_version: 0.5.9 -> 0.5.10" in report.message()
    assert report.regressions.iloc[0]["environment"] == "sglang_version: 0.5.9 -> 0.5.10"


def test_history_window_and_minimum_history():
    run_id, rows = tonight(spec_c8=0.92, i=2)
    report = judge_run(frame(nights(QUIET[:2]) + rows), run_id)
    assert set(report.verdicts["verdict"]) == {"insufficient history"}
    assert not report.regressed
    # Only the last 3 nights count: an old slow era does not hide tonight's drop.
    old = nights([0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0])
    run_id, rows = tonight(spec_c8=0.92)
    report = judge_run(frame(old + rows), run_id, RegressionPolicy(history_runs=3))
    assert verdict(report, SPEC, 8) == "regression"


def test_another_load_shape_is_another_series():
    history = nights(QUIET, output_len=512)  # different lengths: not this series' history
    run_id, rows = tonight(spec_c8=0.5)
    report = judge_run(frame(history + rows), run_id)
    assert set(report.verdicts["verdict"]) == {"new"}


def test_later_runs_are_not_history():
    run_id, rows = tonight(spec_c8=0.92, i=3)
    report = judge_run(frame(nights(QUIET) + rows), run_id)  # nights 4..6 came after
    assert report.history_run_ids == [night(i)[0] for i in range(3)]


def test_failed_level_and_failed_variant_are_regressions():
    run_id, rows = tonight()
    rows = [r for r in rows if r["variant"] != SPEC]
    rows.append(level_row(run_id, "baseline", 8, 1.0, started_at=night(7)[1], status="failed"))
    rows = [
        r
        for r in rows
        if not (r["variant"] == "baseline" and r["status"] == "ok" and r["concurrency"] == 8)
    ]
    run = {
        "failed_variants": [SPEC],
        "variant_errors": json.dumps({SPEC: "ServerDiedError: CUDA out of memory"}),
        "config": json.dumps({"load": {"concurrency": [1, 8]}}),
    }
    report = judge_run(frame(nights(QUIET) + rows), run_id, runs={run_id: run})
    failed = report.regressions
    assert set(zip(failed["variant"], failed["concurrency"], strict=True)) == {
        ("baseline", 8),
        (SPEC, 1),
        (SPEC, 8),
    }
    assert "CUDA out of memory" in report.message()
    lenient = judge_run(
        frame(nights(QUIET) + rows),
        run_id,
        RegressionPolicy(on_failed_level="ignore"),
        runs={run_id: run},
    )
    assert not lenient.regressed


def test_a_level_the_search_skipped_is_not_a_regression():
    run_id, rows = tonight()
    rows = [r for r in rows if not (r["variant"] == SPEC and r["concurrency"] == 8)]
    skipped = level_row(run_id, SPEC, 8, 1.0, started_at=night(7)[1], status="skipped")
    rows.append(skipped | {"output_throughput": None, "error": "skipped from c=8 up: ..."})
    report = judge_run(frame(nights(QUIET) + rows), run_id)
    assert not report.regressed, report.message()
    v = report.verdicts
    assert v[(v["variant"] == SPEC) & (v["concurrency"] == 8)].empty  # no verdict: not measured


def test_policy_validation():
    with pytest.raises(ValidationError, match="unknown metrics"):
        RegressionPolicy(metrics=["throughput"])
    with pytest.raises(ValidationError):
        RegressionPolicy(mad_threshold=0)
    assert RegressionPolicy().min_change("ttft_ms_p99") == 0.10


def test_judge_stored_run_reads_the_store(tmp_path):
    store = ResultsStore(tmp_path)
    run_id, rows = tonight(spec_c8=0.92)
    write(store, nights(QUIET) + rows)
    assert judge_stored_run(store, run_id).regressed
    with pytest.raises(ValueError, match="no level rows"):
        judge_stored_run(store, "nope")


def compare_frames(b_mult: float, repeats_a=None, repeats_b=None, cv=0.02):
    a = [level_row("a", SPEC, 8, 1000.0, repeats=repeats_a, cv=cv if repeats_a else None)]
    b = [
        level_row(
            "b",
            SPEC,
            8,
            1000.0 * b_mult,
            repeats=repeats_b,
            itl_p99=6.0,
            cv=cv if repeats_b else None,
        )
    ]
    return compare_runs(frame(a), frame(b)).iloc[0]


@pytest.mark.parametrize(
    ("mult", "ra", "rb", "expected"),
    [
        (1.10, 4, 4, "faster"),  # noise: hypot(0.02/2, 0.02/2) = 1.4%; 10% >> 2 x 1.4%
        (0.90, 4, 4, "slower"),
        (1.02, 4, 4, "within noise"),
        (1.02, 4, None, "within noise"),  # A's noise stands for B's
        (1.30, None, None, "noise unknown"),  # never called significant without repeats
    ],
)
def test_compare_runs_verdicts(mult, ra, rb, expected):
    row = compare_frames(mult, ra, rb)
    assert row["change"] == pytest.approx(mult - 1)
    assert row["verdict"] == expected
    assert row["itl_ms_p99_change"] == pytest.approx(0.2)
    if expected == "noise unknown":
        assert pd.isna(row["noise"])


def test_a_night_where_nothing_was_measured_is_judged_from_the_runs_table():
    run_id, start = night(7)
    run = {
        "started_at": start,
        "failed_variants": ["baseline", SPEC],
        "variant_errors": json.dumps({"baseline": "HealthTimeout", SPEC: "HealthTimeout"}),
        "config": json.dumps({"load": {"concurrency": [1, 8]}}),
    }
    report = judge_run(frame(nights(QUIET)), run_id, runs={run_id: run})
    assert report.regressed
    assert len(report.regressions) == 4  # both variants at both levels
    assert report.history_run_ids[-1] == night(6)[0]


def test_a_driver_change_is_shown_with_the_regression():
    run_id, rows = tonight(spec_c8=0.9, driver_version="560.35.03")
    history = nights(QUIET, driver_version="550.54.15")
    report = judge_run(frame(history + rows), run_id)
    assert verdict(report, SPEC, 8) == "regression"
    assert report.environment["driver_version"] == ("550.54.15", "560.35.03")
    assert "driver_version: 550.54.15 -> 560.35.03" in report.message()


def _adaptive_night(i: int, share_c8: float, tiers: dict[int, list[int]] | None = None):
    """One night of a step sweep with its own export verified: static chains, then the
    exported tiers at `share_c8` of the best chain at c=8 (1.0 elsewhere)."""
    from specsweep.analysis.adaptive_export import export_adaptive
    from tests.synthetic_levels import adaptive_frame, adaptive_row, static_rows

    run_id, start = night(i)
    ratios = {2: {1: 1.4, 8: 1.2, 32: 0.8}}
    rows = static_rows(run_id, ratios, started_at=start)
    export = export_adaptive(adaptive_frame(rows))
    tiers = tiers or {k: [s] for k, s in export.tiers.items()}
    spec_tiers = {k: v for k, v in tiers.items()}
    for c, ratio in ratios[2].items():
        best = baseline_tput(c) * max(ratio, 1.0)
        share = share_c8 if c == 8 else 1.0
        steps = 0 if ratio < 1 else 2
        rows.append(
            adaptive_row(run_id, "eagle3-adaptive-x", c, best * share, tiers=spec_tiers,
                         steps_share={steps: 1.0}, started_at=start)
        )  # fmt: skip
    return run_id, rows


def test_the_exported_configs_share_is_judged_against_its_history():
    from tests.synthetic_levels import adaptive_frame

    rows = []
    for i in range(5):
        rows += _adaptive_night(i, 1.0 - 0.002 * i)[1]
    run_id, now = _adaptive_night(5, 0.85)  # tonight it reaches 85% of the best chain at c=8
    report = judge_run(adaptive_frame(rows + now), run_id)
    shares = report.verdicts[report.verdicts["metric"] == "policy_share"]
    assert set(shares["variant"]) == {"exported-tiers"}
    assert sorted(shares["concurrency"]) == [1, 8, 32]
    bad = report.regressions
    flagged = set(zip(bad["variant"], bad["metric"], bad["concurrency"], strict=True))
    # its own throughput fell too; the share says it fell against what a tier config reaches
    assert flagged == {("exported-tiers", "policy_share", 8),
                       ("eagle3-adaptive-x", "output_throughput", 8)}  # fmt: skip
    share = bad[bad["metric"] == "policy_share"]
    assert share["value"].iloc[0] == pytest.approx(0.85)
    assert "exported-tiers c=8" in report.message()
    # a steady night judges the series ok
    run_id, steady = _adaptive_night(5, 0.997)
    assert not judge_run(adaptive_frame(rows + steady), run_id).regressed


def test_a_hand_written_tier_config_keeps_its_own_name():
    from tests.synthetic_levels import adaptive_frame

    rows = []
    for i in range(4):
        rows += _adaptive_night(i, 1.0, tiers={1: [2], 16: [0]})[1]
    run_id, now = _adaptive_night(4, 1.0, tiers={1: [2], 16: [0]})
    shares = judge_run(adaptive_frame(rows + now), run_id).verdicts
    assert set(shares.loc[shares["metric"] == "policy_share", "variant"]) == {"eagle3-adaptive-x"}


# ---- 95% intervals: a change counts only when tonight's and the history's separate -------


def with_ci(rows: list[dict], rel: float, metric: str = "output_throughput") -> list[dict]:
    """Give every row a symmetric 95% interval of +-rel on `metric` (as schema 3 stores it)."""
    for r in rows:
        r[f"{metric}_lo"] = r[metric] * (1 - rel)
        r[f"{metric}_hi"] = r[metric] * (1 + rel)
    return rows


def without_ci(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith(("_lo", "_hi"))} for r in rows]


def test_a_6pct_drop_inside_wide_intervals_is_ok_though_the_old_rule_flags_it():
    run_id, rows = tonight(spec_c8=0.94)
    history = nights(QUIET)
    wide = with_ci(history, 0.08) + with_ci(rows, 0.08)
    # Without intervals (a file before schema 3) the rule is unchanged: 6% > 5%, z ~ -8.
    old = judge_run(frame(without_ci(wide)), run_id)
    assert verdict(old, SPEC, 8) == "regression"
    report = judge_run(frame(wide), run_id)
    assert verdict(report, SPEC, 8) == "ok"
    assert not report.regressed
    v = report.verdicts
    row = v[(v["variant"] == SPEC) & (v["concurrency"] == 8)]
    row = row[row["metric"] == "output_throughput"].iloc[0]
    base = baseline_tput(8) * 1.2
    assert row["robust_z"] < -4 and row["change"] == pytest.approx(-0.06)
    assert row["value_hi"] == pytest.approx(base * 0.94 * 1.08)
    # the history's band: its nights' own +-8% beats 1.96 x the quiet +-1% swing
    assert row["history_lo"] == pytest.approx(base * 0.92)
    assert row["history_hi"] == pytest.approx(base * 1.08)


def test_the_same_drop_with_narrow_intervals_is_a_regression_with_both_intervals():
    run_id, rows = tonight(spec_c8=0.94)
    report = judge_run(frame(with_ci(nights(QUIET), 0.01) + with_ci(rows, 0.01)), run_id)
    assert verdict(report, SPEC, 8) == "regression"
    row = report.regressions.iloc[0]
    base = baseline_tput(8) * 1.2
    sigma = 1.4826 * 0.005  # QUIET's MAD is 0.5%
    assert row["history_lo"] == pytest.approx(base * (1 - 1.959964 * sigma))  # > its own 1%
    assert row["value_hi"] < row["history_lo"]
    message = report.message()
    assert f"{base * 0.94:,.4g} [{base * 0.94 * 0.99:,.4g}, {base * 0.94 * 1.01:,.4g}]" in message
    assert f"vs median {base:,.4g} [{row['history_lo']:,.4g}, " in message
    payload = report.event_payload()["regressions"][0]
    assert payload["value_lo"] == pytest.approx(base * 0.94 * 0.99)
    assert payload["history_hi"] == pytest.approx(row["history_hi"])
    from specsweep.analysis.regression import verdict_markdown

    markdown = verdict_markdown(report)
    assert f"| {base * 0.94:,.4g} [{base * 0.94 * 0.99:,.4g}, " in markdown


def test_history_without_intervals_uses_its_swing_alone():
    """Old history files (no intervals) against tonight's: 1.96 x robust SD is the band."""
    run_id, rows = tonight(spec_c8=0.94)
    narrow = judge_run(frame(nights(QUIET) + with_ci(rows, 0.01)), run_id)
    assert verdict(narrow, SPEC, 8) == "regression"
    wide = judge_run(frame(nights(QUIET) + with_ci(rows, 0.08)), run_id)
    assert verdict(wide, SPEC, 8) == "ok"  # tonight's own +-8% reaches the history's band


def test_a_flat_history_cannot_shrink_the_band_below_what_one_night_resolves():
    """Three identical nights (MAD 0) measured +-3% each: the band is +-3%, not a point."""
    run_id, rows = tonight(spec_c8=0.94, i=3)
    history = with_ci(nights([1.0, 1.0, 1.0]), 0.03)
    assert verdict(judge_run(frame(history + with_ci(rows, 0.01)), run_id), SPEC, 8) == (
        "regression"
    )  # tonight's hi 0.949 < the band's lo 0.97
    assert verdict(judge_run(frame(history + with_ci(rows, 0.04)), run_id), SPEC, 8) == "ok"


def test_latency_and_improvements_need_separated_intervals_too():
    def judged(itl_rel: float, tput_rel: float):
        run_id, rows = tonight()
        for r in rows:
            if r["variant"] == SPEC and r["concurrency"] == 8:
                r["itl_ms_p50"] *= 1.3
                r["output_throughput"] *= 1.15
        every = nights(QUIET) + rows
        return judge_run(frame(with_ci(with_ci(every, itl_rel, "itl_ms_p50"), tput_rel)), run_id)

    narrow = judged(0.02, 0.01)
    assert verdict(narrow, SPEC, 8, "itl_ms_p50") == "regression"
    assert verdict(narrow, SPEC, 8) == "improvement"
    wide = judged(0.2, 0.1)
    assert verdict(wide, SPEC, 8, "itl_ms_p50") == "ok"  # +30% inside +-20% on both sides
    assert verdict(wide, SPEC, 8) == "ok"  # +15% inside +-10% on both sides
