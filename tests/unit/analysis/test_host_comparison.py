"""Several targets in one run: one target per variant in the answer, and hosts compared."""

from __future__ import annotations

from datetime import timedelta

import pytest

from specsweep.analysis import (
    analyze,
    answer_rows,
    chosen_targets,
    compare_hosts,
    environment_changes,
    gpu_kind_warning,
    judge_run,
)
from specsweep.analysis.levels import best_per_level, metric_table
from tests.synthetic_levels import (
    LEVELS,
    SPEC,
    baseline_tput,
    frame,
    night,
    on_target,
    sweep_rows,
)

RUN = "20261101T020000Z-fleet1"


def died_midway(run_id: str = RUN) -> list[dict]:
    """gpu-a measures everything, then dies in SPEC at c=4 (c=1, 2 done, with wild numbers);
    SPEC is re-run in full on gpu-b, an hour later."""
    full = sweep_rows(run_id, target="gpu-a", gpu_host="gpu-a.lan")
    rows = [r for r in full if r["variant"] == "baseline"]
    partial = [dict(r) for r in full if r["variant"] == SPEC and r["concurrency"] <= 4]
    for r in partial:
        r["output_throughput"] *= 10  # mixing these in would move every number
        r["ttft_ms_p99"] = 999.0
        if r["concurrency"] == 4:
            r.update(status="failed", error="server died")
    spec = [r for r in full if r["variant"] == SPEC]
    return rows + partial + on_target(spec, "gpu-b", later=timedelta(hours=1))


def test_each_variant_comes_from_the_target_with_most_ok_levels():
    levels = frame(died_midway())
    chosen = chosen_targets(levels).set_index("variant")
    assert chosen.loc["baseline", "target"] == "gpu-a"
    assert chosen.loc[SPEC, "target"] == "gpu-b"
    assert chosen.loc[SPEC, "ok_levels"] == len(LEVELS) and chosen.loc[SPEC, "targets"] == 2
    used = answer_rows(levels)
    assert set(zip(used["variant"], used["target"], strict=True)) == {
        ("baseline", "gpu-a"),
        (SPEC, "gpu-b"),
    }


def test_the_answer_ignores_the_partial_host_rows():
    levels = frame(died_midway())
    single = frame(sweep_rows(RUN))  # the same curves measured on one host
    answer, expected = analyze(levels, RUN), analyze(single, RUN)
    assert answer.first.throughput.to_numpy() == pytest.approx(expected.first.throughput.to_numpy())
    assert (
        answer.first.best["best_variant"].tolist() == expected.first.best["best_variant"].tolist()
    )
    assert answer.first.pivots[SPEC].concurrency == pytest.approx(2**4.5)
    assert answer.first.policy.rule() == expected.first.policy.rule()
    assert answer.first.latency["ttft_ms_p99"].max() == 20.0  # not gpu-a's 999
    assert answer.first.failed_levels.empty  # the dead host's level is in the Hosts section instead
    assert len(answer.stored) == len(levels) and len(answer.first.levels) == 2 * len(LEVELS)
    # The per-level helpers select too, so a notebook on the raw rows gets the same numbers.
    assert metric_table(levels, "output_throughput").equals(answer.first.throughput)
    assert best_per_level(levels)["speedup"].tolist() == expected.first.best["speedup"].tolist()


def test_ties_in_ok_levels_go_to_the_latest_measurement():
    first = sweep_rows(RUN, target="gpu-a")
    rerun = on_target(first, "gpu-b", 0.5, later=timedelta(hours=2))
    assert chosen_targets(frame(first + rerun))["target"].unique().tolist() == ["gpu-b"]
    earlier = on_target(first, "gpu-b", 0.5, later=-timedelta(hours=2))
    assert chosen_targets(frame(first + earlier))["target"].unique().tolist() == ["gpu-a"]


def test_a_single_target_run_is_left_as_it_is():
    levels = frame(sweep_rows(RUN))
    assert answer_rows(levels) is levels
    assert compare_hosts(levels) is None
    assert gpu_kind_warning(levels) is None
    assert analyze(levels, RUN).first.hosts is None


def test_regression_skips_the_rows_of_a_host_that_died():
    """gpu-a's SPEC c=4 failed tonight and has a history: judged as is, that is a regression."""
    rows = []
    for i in range(4):
        rid, start = night(i)
        rows += sweep_rows(rid, started_at=start, target="gpu-a")
    tonight, start = night(4)
    crashed = [
        {**r, "run_id": tonight, "started_at": r["started_at"] + timedelta(days=4)}
        for r in died_midway(tonight)
    ]
    for r in crashed:
        r["ended_at"] = r["started_at"] + timedelta(seconds=1)
    report = judge_run(frame(rows + crashed), tonight)
    assert not report.regressed, report.message()
    judged = report.verdicts
    assert set(judged.loc[judged["variant"] == SPEC, "target"]) == {"gpu-b"}


def two_hosts(factor: float, **kw) -> list[dict]:
    a = sweep_rows(RUN, target="gpu-a", gpu_host="gpu-a.lan", **kw)
    return a + on_target(a, "gpu-b", factor, later=timedelta(minutes=1), gpu_uuids="GPU-b0")


def test_a_host_20_percent_slower_is_flagged():
    hc = compare_hosts(frame(two_hosts(0.8)))
    hosts = hc.hosts.set_index("target")
    assert hosts.loc["gpu-b", "median_ratio"] == pytest.approx(0.8)
    assert hosts.loc["gpu-b", "slower"] and hosts.loc["gpu-b", "verdict"] == "slower"
    assert hosts.loc["gpu-b", "basis"] == "minimum difference"
    assert hosts.loc["gpu-a", "verdict"] == "fastest" and not hosts.loc["gpu-a", "slower"]
    assert hosts.loc["gpu-b", "gpu_uuids"] == "GPU-b0" and hosts.loc["gpu-b", "gpu_host"] == (
        "gpu-b.lan"
    )
    assert hosts.loc["gpu-b", "shared_cells"] == 2 * len(LEVELS)
    assert hc.slower == ["gpu-b"]
    assert "gpu-b is 20.0% slower than the fastest" in hc.line()


def test_one_cell_per_target_with_ratio_and_latency():
    hc = compare_hosts(frame(two_hosts(0.8)))
    cell = hc.cells[(hc.cells["variant"] == "baseline") & (hc.cells["concurrency"] == 8)]
    assert cell["target"].tolist() == ["gpu-a", "gpu-b"]
    assert cell["output_throughput"].tolist() == pytest.approx(
        [baseline_tput(8), 0.8 * baseline_tput(8)]
    )
    assert cell["ratio"].tolist() == pytest.approx([1.0, 0.8])
    assert cell["verdict"].tolist() == ["fastest", "slower"]
    assert cell["ttft_ms_p50"].tolist() == [10.0, 10.0]
    # Same ok levels: the tie goes to the later measurement, gpu-b.
    assert cell["in_answer"].tolist() == [False, True]
    assert hc.cells["variant"].iloc[0] == "baseline"  # legend order


@pytest.mark.parametrize(
    ("factor", "repeats", "cv", "slower", "basis"),
    [
        (0.98, None, None, False, "minimum difference"),  # 2% < 5% without repeats
        (0.93, None, None, True, "minimum difference"),
        (0.97, 3, 0.03, False, "repeats"),  # 3% within 2 SE = 2·sqrt(2)·0.03/sqrt(3) ≈ 4.9%
        (0.80, 3, 0.03, True, "repeats"),
        (0.97, 5, 0.005, True, "repeats"),  # quiet repeats: a 3% gap is real
    ],
)
def test_slower_means_beyond_the_noise(factor, repeats, cv, slower, basis):
    hc = compare_hosts(frame(two_hosts(factor, repeats=repeats, cv=cv)))
    b = hc.hosts.set_index("target").loc["gpu-b"]
    assert (b["slower"], b["basis"]) == (slower, basis)
    assert b["verdict"] == ("slower" if slower else "within noise")


def test_targets_without_a_shared_level_are_listed_not_compared():
    a = sweep_rows(RUN, target="gpu-a")
    rows = [r for r in a if r["variant"] == "baseline"]
    rows += on_target([r for r in a if r["variant"] == SPEC], "gpu-b")
    hc = compare_hosts(frame(rows))
    assert hc.cells.empty and hc.left_out.empty
    assert hc.hosts["verdict"].tolist() == ["no shared levels"] * 2
    assert hc.hosts["in_answer"].tolist() == ["baseline", SPEC]
    assert "cannot be compared" in hc.line()


def test_left_out_rows_name_the_target_used_instead():
    hc = compare_hosts(frame(died_midway()))
    rec = hc.left_out.to_dict("records")
    assert rec == [
        {
            "variant": SPEC,
            "target": "gpu-a",
            "ok_levels": 2,
            "failed_levels": 1,
            "used_instead": "gpu-b",
        }
    ]


def split_kinds(**b_facts) -> list[dict]:
    a = sweep_rows(RUN, target="gpu-a", driver_version="550.54")
    rows = [r for r in a if r["variant"] == "baseline"]
    spec = [r for r in a if r["variant"] == SPEC]
    return rows + on_target(spec, "gpu-b", **{"driver_version": "550.54", **b_facts})


def test_gpu_kind_warning_only_when_the_answer_spans_gpu_kinds():
    text = gpu_kind_warning(frame(split_kinds(gpu_name="NVIDIA H100 80GB HBM3")))
    assert text == (
        "variants were measured on different GPU kinds: "
        "baseline on gpu-a (1x NVIDIA H200, driver 550.54); "
        f"{SPEC} on gpu-b (1x NVIDIA H100 80GB HBM3, driver 550.54); "
        "compare hosts before trusting the ranking"
    )
    assert "driver 560.1" in gpu_kind_warning(frame(split_kinds(driver_version="560.1")))
    assert "2x NVIDIA H200" in gpu_kind_warning(frame(split_kinds(gpu_count=2)))
    # Other machines and cards of the same kind: no warning.
    assert gpu_kind_warning(frame(split_kinds(gpu_uuids="GPU-x"))) is None
    assert analyze(frame(split_kinds()), RUN).first.gpu_kind_warning is None


def test_a_left_out_host_of_another_kind_does_not_warn():
    rows = died_midway()
    for r in rows:
        if r["target"] == "gpu-a" and r["variant"] == SPEC:
            r["gpu_name"] = "NVIDIA A100"
    assert gpu_kind_warning(frame(rows)) is None


def test_run_comparison_names_the_host_and_cards_that_changed():
    a = frame(sweep_rows("ra", gpu_host="gpu-a.lan", gpu_uuids="GPU-a0"))
    b = frame(sweep_rows("rb", gpu_host="gpu-b.lan", gpu_uuids="GPU-b0"))
    changes = environment_changes(a, b)
    assert changes["gpu_host"] == ("gpu-a.lan", "gpu-b.lan")
    assert changes["gpu_uuids"] == ("GPU-a0", "GPU-b0")


def test_the_cli_summary_and_the_report_give_one_answer_on_a_fleet_run():
    """summarize() (the CLI summary, the run's summary artifact) is a view of the answer:
    on a fleet run it uses the same target per variant and the same variant order."""
    from specsweep.analysis.summary import summarize
    from specsweep.report.markdown import summary_markdown

    levels = frame(died_midway())
    summary, answer = summarize(levels), analyze(levels, RUN)
    assert summary.throughput.equals(answer.first.throughput)
    assert list(summary.throughput.columns) == list(answer.first.throughput.columns)
    best = answer.first.best[["concurrency", "best_variant", "speedup"]]
    assert summary.best[["concurrency", "best_variant", "speedup"]].equals(best)
    assert summary.failed_levels.empty  # gpu-a's dead level is not this answer's
    markdown = summary_markdown(RUN, summary, {})
    assert (
        "Failed levels" not in markdown and f"{answer.first.throughput.iat[0, 1]:,.1f}" in markdown
    )
