"""A fleet sweep's baseline plan: which runs are pinned where, and every re-plan (a failed
calibration, a lost reference, a lost host that comes back) without a Prefect server."""

from __future__ import annotations

import math

import pytest

from specsweep.analysis.baselines import CALIBRATED, OWN, REFERENCE, HostRole
from specsweep.fleet.plan import (
    CALIBRATION,
    FULL,
    BaselinePlan,
    Check,
    PinnedRun,
    calibration_sentence,
)
from specsweep.results.store import ResultsStore

H200 = {"gpu_name": "NVIDIA H200", "gpu_count": 1, "driver_version": "570.1"}
A100 = {"gpu_name": "NVIDIA A100", "gpu_count": 1, "driver_version": "550.2"}


def verdict(passed: bool | None, value: float = 0.8, spread: float = 0.05) -> dict:
    """Columns as analysis.baselines.calibrate returns them."""
    out = {"calibration_concurrency": 16, "calibration_shape": "in16-out64", "tolerance": 0.02}
    if passed is None:
        return out | {"passed": None, "note": "no ok baseline level on gpu-a at c=16"}
    return out | {
        "calibration_ratio": value,
        "calibration_lo": value * (1 - spread),
        "calibration_hi": value * (1 + spread),
        "passed": passed,
        "note": "from calibrate",
    }


def planned(mode: str = "per_gpu_kind", **facts) -> tuple[BaselinePlan, object]:
    plan = BaselinePlan(mode, ["gpu-a", "gpu-b", "gpu-c", "gpu-d"])
    decision = plan.add(list(facts), facts)
    return plan, decision


def test_per_gpu_kind_pins_a_full_baseline_per_kind_and_a_calibration_on_the_others():
    plan, d = planned(**{"gpu-a": H200, "gpu-b": H200, "gpu-c": A100, "gpu-d": None})
    assert d.submit == [
        PinnedRun("gpu-a", FULL),
        PinnedRun("gpu-b", CALIBRATION),
        PinnedRun("gpu-c", FULL),
        PinnedRun("gpu-d", FULL),  # unknown kind: nothing to calibrate against
    ]
    assert d.rows == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"] and d.check == []
    assert plan.role("gpu-b") == HostRole(CALIBRATED, "gpu-a")
    assert "gpu-d (unknown GPU kind): measures its own full baseline" in d.said[3]
    assert plan.in_flight()


def test_every_host_pins_a_full_baseline_everywhere():
    plan, d = planned("every_host", **{"gpu-a": H200, "gpu-b": H200})
    assert d.submit == [PinnedRun("gpu-a", FULL), PinnedRun("gpu-b", FULL)]
    assert [plan.role(h).role for h in ("gpu-a", "gpu-b")] == [REFERENCE, OWN]
    assert plan.finished("gpu-b", FULL).check == []  # nothing is ever calibrated
    assert plan.finished("gpu-a", FULL).check == [] and not plan.in_flight()


def test_a_calibration_is_judged_once_both_sides_are_measured():
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200})
    assert plan.finished("gpu-b", CALIBRATION).check == []  # the reference is still measuring
    d = plan.finished("gpu-a", FULL)
    assert d.check == [Check("gpu-b", "gpu-a")]
    assert plan.finished("gpu-a", FULL).check == []  # asked once until answered


def test_a_passed_calibration_keeps_the_references_baseline():
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200})
    plan.finished("gpu-a", FULL)
    plan.finished("gpu-b", CALIBRATION)
    d = plan.calibrated("gpu-b", verdict(True, value=1.004, spread=0.01))
    assert d.submit == [] and d.rows == ["gpu-b"]
    assert plan.role("gpu-b") == HostRole(CALIBRATED, "gpu-a")
    assert d.said == [
        "gpu-b: calibration at c=16: +0.4% vs gpu-a (95%: -0.6% to +1.4%; tolerance ±2%): "
        "uses gpu-a's baseline"
    ]
    assert not plan.in_flight()


@pytest.mark.parametrize("passed", [False, None], ids=["differs", "not-judged"])
def test_a_failed_calibration_pins_the_hosts_own_full_baseline(passed):
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200})
    plan.finished("gpu-a", FULL)
    d = plan.finished("gpu-b", CALIBRATION)
    d = plan.calibrated("gpu-b", verdict(passed))
    assert d.submit == [PinnedRun("gpu-b", FULL)]
    assert plan.role("gpu-b") == HostRole(OWN, "gpu-b") and plan.in_flight()
    assert d.said[0].endswith("measures its own baseline")
    if passed is False:
        assert d.said[0].startswith("gpu-b: calibration at c=16: -20.0% vs gpu-a (95%: -24.0%")
    else:
        assert "no ok baseline level on gpu-a at c=16" in d.said[0]
    assert plan.finished("gpu-b", FULL).check == [] and not plan.in_flight()


def test_rows_follow_the_plan_and_fit_the_hosts_table(tmp_path):
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200})
    plan.finished("gpu-a", FULL)
    plan.finished("gpu-b", CALIBRATION)
    plan.calibrated("gpu-b", verdict(False))
    store = ResultsStore(tmp_path)
    for host in ("gpu-a", "gpu-b"):
        store.write_host_plan(plan.row("r1", host))
    rows = store.read_host_plans("r1").set_index("target")
    assert rows.loc["gpu-a", "role"] == REFERENCE and rows.loc["gpu-a", "gpu_kind"] == (
        "1x NVIDIA H200"
    )
    b = rows.loc["gpu-b"]
    assert (b["role"], b["baseline_target"], bool(b["passed"])) == (OWN, "gpu-b", False)
    assert math.isclose(b["calibration_ratio"], 0.8) and b["calibration_concurrency"] == 16
    assert b["mode"] == "per_gpu_kind" and b["position"] == 1


def test_a_lost_reference_hands_its_kind_to_the_next_host_and_its_hosts_are_checked_again():
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200, "gpu-c": H200})
    plan.finished("gpu-b", CALIBRATION)
    plan.finished("gpu-c", CALIBRATION)
    d = plan.lost("gpu-a", FULL)
    assert plan.role("gpu-a") == HostRole(OWN, "gpu-a")  # never the kind's reference again
    assert plan.role("gpu-b") == HostRole(REFERENCE, "gpu-b")
    assert plan.role("gpu-c") == HostRole(CALIBRATED, "gpu-b")
    # its calibration level is kept: the full baseline there measures only the rest
    assert d.submit == [PinnedRun("gpu-b", FULL)] and d.check == []
    assert d.rerun_from == ["gpu-a"] and set(d.rows) == {"gpu-a", "gpu-b", "gpu-c"}
    assert any("gpu-b becomes the reference of 1x NVIDIA H200" in s for s in d.said)
    assert plan.references() == {"1x NVIDIA H200": "gpu-b"}
    assert plan.finished("gpu-b", FULL).check == [Check("gpu-c", "gpu-b")]


def test_a_host_measuring_its_own_full_baseline_becomes_the_reference_without_a_new_run():
    plan, _ = planned("every_host", **{"gpu-a": H200, "gpu-b": H200, "gpu-c": H200})
    d = plan.lost("gpu-a", FULL)
    assert d.submit == [] and plan.role("gpu-b") == HostRole(REFERENCE, "gpu-b")
    assert plan.role("gpu-c") == HostRole(OWN, "gpu-c")  # every_host: its own, still
    assert "its own full baseline is the kind's" in " ".join(d.said)


def test_a_lost_reference_alone_of_its_kind_leaves_the_kind_to_the_next_host_seen():
    plan, _ = planned(**{"gpu-a": H200, "gpu-c": A100})
    d = plan.lost("gpu-a", FULL)
    assert d.submit == [] and "no other live host of 1x NVIDIA H200" in d.said[-1]
    d = plan.add(["gpu-b"], {"gpu-b": H200})  # a worker started mid-sweep
    assert d.submit == [PinnedRun("gpu-b", FULL)]
    assert plan.role("gpu-b") == HostRole(REFERENCE, "gpu-b")


def test_a_host_seen_later_is_calibrated_against_the_live_reference_whatever_its_place():
    plan = BaselinePlan("per_gpu_kind", ["gpu-a", "gpu-b"])
    plan.add(["gpu-b"], {"gpu-b": H200})
    assert plan.role("gpu-b").role == REFERENCE
    d = plan.add(["gpu-a", "gpu-b"], {"gpu-a": H200, "gpu-b": H200})  # b is not planned again
    assert d.submit == [PinnedRun("gpu-a", CALIBRATION)]
    assert plan.role("gpu-a") == HostRole(CALIBRATED, "gpu-b")


def test_a_lost_calibration_reruns_the_hosts_variants_and_a_host_that_comes_back_is_replanned():
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200})
    d = plan.lost("gpu-b", CALIBRATION)
    assert d.rerun_from == ["gpu-b"] and d.submit == []
    assert "gpu-b: lost before its calibration" in d.said[0]
    assert plan.row("r", "gpu-b")["note"] == "lost before its calibration"
    assert plan.pending("gpu-a") == [FULL] and plan.pending("gpu-b") == []
    assert plan.seen_again("gpu-a").submit == []  # not lost: nothing to do
    d = plan.seen_again("gpu-b")
    assert d.submit == [PinnedRun("gpu-b", CALIBRATION)]
    assert plan.role("gpu-b") == HostRole(CALIBRATED, "gpu-a")
    assert plan.row("r", "gpu-b").get("note") is None


def test_a_lost_own_baseline_reruns_the_hosts_variants():
    plan, _ = planned(**{"gpu-a": H200, "gpu-d": None})
    d = plan.lost("gpu-d", FULL)
    assert d.rerun_from == ["gpu-d"] and d.submit == []
    assert plan.references() == {"1x NVIDIA H200": "gpu-a"}  # an unknown kind hands on nothing


def test_a_lost_host_that_finishes_its_pinned_run_after_all_is_planned_again():
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200})
    plan.lost("gpu-b", CALIBRATION)
    plan.finished("gpu-a", FULL)
    d = plan.finished("gpu-b", CALIBRATION)  # the cancel came too late: it measured
    assert d.submit == [] and d.check == [Check("gpu-b", "gpu-a")]


def test_a_calibrated_host_lost_after_its_check_failed_reruns_its_variants():
    plan, _ = planned(**{"gpu-a": H200, "gpu-b": H200})
    plan.finished("gpu-b", CALIBRATION)
    plan.hosts["gpu-b"].lost = True  # lost while running a shared variant, say
    plan.finished("gpu-a", FULL)
    d = plan.calibrated("gpu-b", verdict(False))
    assert d.submit == [] and d.rerun_from == ["gpu-b"]


def test_once_has_no_plan():
    with pytest.raises(ValueError, match="once"):
        BaselinePlan("once", ["gpu-a"])


def test_the_sentence_says_an_unbounded_interval():
    columns = verdict(False) | {"calibration_hi": math.inf}
    assert "(95% interval unbounded; tolerance ±2%)" in calibration_sentence(
        "gpu-b", "gpu-a", columns
    )
