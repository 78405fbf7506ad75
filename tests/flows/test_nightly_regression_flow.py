"""nightly-regression under the Prefect harness, on a history written into a real store.

Tonight's levels are already on disk, so the flow's sweep finds every level
measured and launches nothing: exactly what a retry after a regression sees.
"""

from __future__ import annotations

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from prefect.events.clients import AssertingEventsClient
from prefect.testing.fixtures import asserting_events_worker  # noqa: F401 - a fixture

from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import RegressionDetected
from specsweep.flows.nightly_regression import nightly_regression, nightly_run_id
from specsweep.report.render import report_link
from specsweep.results.store import ResultsStore
from specsweep.tasks.regression import DECISION_EVENT, DECISIONS_KEY, REGRESSION_EVENT
from tests.conftest import sim_config_data
from tests.synthetic_levels import SPEC, baseline_tput, level_row, night, write

pytestmark = [pytest.mark.flow]

QUIET = [1.0, 1.01, 0.99, 1.005, 0.995]


def history_and_tonight(config, spec_c4: float, ci: float | None = None) -> str:
    """Five quiet nights, then tonight with SPEC at c=4 multiplied by spec_c4; with `ci`,
    every level carries a 95% interval of +-ci on its output throughput."""
    assert [v.label for v in sweep_variants(config)] == ["baseline", SPEC]
    store = ResultsStore(config.results_dir)
    shape = {"target": config.target.name, "model_path": config.server.model_path}
    for i, m in enumerate([*QUIET, 1.0]):
        run_id, start = night(i)
        for c in config.load.concurrency:
            spec_m = spec_c4 if (i == len(QUIET) and c == 4) else m
            rows = [
                level_row(run_id, "baseline", c, baseline_tput(c) * m, started_at=start, **shape),
                level_row(
                    run_id, SPEC, c, baseline_tput(c) * 1.2 * spec_m, started_at=start, **shape
                ),
            ]
            for row in rows if ci is not None else ():
                row["output_throughput_lo"] = row["output_throughput"] * (1 - ci)
                row["output_throughput_hi"] = row["output_throughput"] * (1 + ci)
            write(store, rows)
    return night(len(QUIET))[0]


def flow_artifacts(flow_run_id) -> dict:
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a for a in artifacts}


def test_regression_fails_the_run_and_emits_the_event(tmp_path, port, asserting_events_worker):  # noqa: F811
    config = parse_config(sim_config_data(tmp_path, port))
    run_id = history_and_tonight(config, spec_c4=0.92)
    with pytest.raises(RegressionDetected, match=rf"{SPEC} c=4 .* output_throughput .*\(-8\.0%"):
        nightly_regression(config, run_id=run_id)
    # A retry judges the same stored numbers: the regression does not go away.
    state = nightly_regression(config, run_id=run_id, return_state=True)
    assert state.is_failed()
    asserting_events_worker.drain()
    client = asserting_events_worker._client
    assert isinstance(client, AssertingEventsClient)
    events = [e for e in client.events if e.event == REGRESSION_EVENT]
    assert len(events) == 2
    event = events[-1]
    assert event.resource.id == f"specsweep.run.{run_id}"
    assert event.payload["metrics"] == ["output_throughput"]
    (reg,) = event.payload["regressions"]
    assert (reg["variant"], reg["concurrency"]) == (SPEC, 4)
    assert reg["change"] == pytest.approx(-0.08)
    assert any(r.role == "flow-run" for r in event.related)  # automations can link back


def test_a_quiet_night_passes_and_publishes_the_answer(tmp_path, port):
    config = parse_config(sim_config_data(tmp_path, port))
    run_id = history_and_tonight(config, spec_c4=0.99)
    state = nightly_regression(config, run_id=run_id, return_state=True)
    assert state.is_completed()
    result = state.result()
    assert result["regressed"] is False
    assert result["policy"].startswith("Deploy SGLang adaptive tiers 1:[2]")  # the decision
    assert result["decisions"].endswith("decisions unchanged (4 same)")  # no intervals
    assert result["decision_changes"] == []
    artifacts = flow_artifacts(state.state_details.flow_run_id)
    assert {
        "specsweep-results",
        "specsweep-answer",
        "specsweep-report",
        "specsweep-regression-verdict",
        DECISIONS_KEY,
    } <= set(artifacts)
    assert SPEC in str(artifacts["specsweep-results"].data)


def test_a_decision_that_moved_is_published_and_emitted_beside_the_regression(
    tmp_path,
    port,
    asserting_events_worker,  # noqa: F811
):
    """Tonight SPEC falls to 0.96x the baseline at c=4, every level +-1%: a regression, and
    the baseline is now best there beyond the intervals, the pivot and the policy moved."""
    config = parse_config(sim_config_data(tmp_path, port))
    run_id = history_and_tonight(config, spec_c4=0.8, ci=0.01)
    state = nightly_regression(config, run_id=run_id, return_state=True)
    assert state.is_failed()  # the regression still fails the run
    with pytest.raises(RegressionDetected):
        state.result()
    artifacts = flow_artifacts(state.state_details.flow_run_id)
    markdown = str(artifacts[DECISIONS_KEY].data)
    assert f"| best | c=4 | {SPEC} | baseline |" in markdown
    asserting_events_worker.drain()
    events = asserting_events_worker._client.events
    assert [e.event for e in events if e.event.startswith("specsweep.")] == [
        DECISION_EVENT,
        REGRESSION_EVENT,
    ]
    (event,) = [e for e in events if e.event == DECISION_EVENT]
    assert event.resource.id == f"specsweep.run.{run_id}"
    assert event.resource["specsweep.target"] == config.target.name
    assert event.payload["kinds"] == ["best", "pivot", "policy"]
    best = next(c for c in event.payload["changes"] if c["kind"] == "best")
    assert (best["subject"], best["before"], best["after"]) == ("c=4", SPEC, "baseline")
    assert best["numbers"]["lead"] == pytest.approx(1 / 0.96)
    assert best["numbers"]["lead_lo"] > 1.01
    assert best["previous_run_id"] == night(len(QUIET) - 1)[0]
    assert any(r.role == "flow-run" for r in event.related)


def test_a_failure_judging_the_decisions_keeps_the_regression_verdict(tmp_path, port, monkeypatch):
    import specsweep.flows.nightly_regression as nightly

    def broken(*args, **kwargs):
        raise RuntimeError("decisions broke")

    monkeypatch.setattr(nightly, "judge_decisions", broken)
    config = parse_config(sim_config_data(tmp_path, port))
    run_id = history_and_tonight(config, spec_c4=0.92)
    with pytest.raises(RegressionDetected, match=rf"{SPEC} c=4 .* output_throughput"):
        nightly_regression(config, run_id=run_id)


def test_the_derived_run_id_survives_a_flow_retry():
    seen: list[str] = []

    @flow(retries=1, retry_delay_seconds=0)
    def flaky() -> None:
        seen.append(nightly_run_id())
        if len(seen) == 1:
            raise RuntimeError("first attempt fails")

    flaky()
    assert len(seen) == 2 and seen[0] == seen[1]


def test_a_first_night_on_the_simulator_measures_and_has_nothing_to_compare(tmp_path, port):
    config = parse_config(sim_config_data(tmp_path, port))
    result = nightly_regression(config)
    run_id = result["run_id"]
    levels = ResultsStore(config.results_dir).read_levels(run_id)
    assert len(levels) == 4  # baseline and SPEC at c=1 and c=4, measured tonight
    assert result["regressed"] is False
    assert result["verdict"].startswith(f"run {run_id}: no regression (12 new)")
    assert (tmp_path / "results" / "reports" / run_id / "report.html").exists()


def test_report_link_is_served_under_the_results_root(tmp_path):
    html = tmp_path / "reports" / "r1" / "report.html"
    assert report_link(html, tmp_path, "https://ci.example/results/") == (
        "https://ci.example/results/reports/r1/report.html"
    )
    assert report_link(html, tmp_path, None) == html.resolve().as_uri()
    assert report_link(html, tmp_path / "elsewhere", "https://x/").startswith("file://")


def test_the_exported_policy_falling_short_is_a_regression(tmp_path, port):
    """verify_policy every night: tonight the exported tiers reach 85% of the best chain at
    c=4 where they used to reach all of it. Every level is on disk, as on a retry: the flow
    exports, finds the export measured, and judges."""
    from specsweep.config import Variant
    from tests.synthetic_levels import adaptive_row

    data = sim_config_data(
        tmp_path, port, verify_policy={"default_tiers": False, "pinned_zero": False}
    )
    config = parse_config(data)
    store = ResultsStore(config.results_dir)
    shape = {"target": config.target.name, "model_path": config.server.model_path}
    exported = Variant(
        algorithm="EAGLE3", draft_model_path="sim/draft", adaptive={"tiers": {1: [2]}}
    ).label  # speculation wins at c=1 and 4
    for i, m in enumerate([*QUIET, 1.0]):
        run_id, start = night(i)
        for c in config.load.concurrency:
            share = 0.85 if (i == len(QUIET) and c == 4) else 1.0
            spec = baseline_tput(c) * 1.2 * m
            write(store, [
                level_row(run_id, "baseline", c, baseline_tput(c) * m, started_at=start, **shape),
                level_row(run_id, SPEC, c, spec, started_at=start, **shape),
                adaptive_row(run_id, exported, c, spec * share, tiers={1: [2]},
                             steps_share={2: 1.0}, started_at=start, **shape),
            ])  # fmt: skip
    tonight = night(len(QUIET))[0]
    with pytest.raises(RegressionDetected) as exc:
        nightly_regression(config, run_id=tonight)
    assert "exported-tiers c=4 (test-host) policy_share 0.85 vs median 1" in str(exc.value)
    assert len(store.read_levels(tonight)) == 6  # nothing was launched: all on disk
