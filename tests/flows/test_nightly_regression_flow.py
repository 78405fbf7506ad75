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

from flows.nightly_regression import nightly_regression, nightly_run_id
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import RegressionDetected
from specsweep.report.render import report_link
from specsweep.results.store import ResultsStore
from tasks.regression import REGRESSION_EVENT
from tests.conftest import sim_config_data
from tests.synthetic_levels import SPEC, baseline_tput, level_row, night, write

pytestmark = [pytest.mark.flow]

QUIET = [1.0, 1.01, 0.99, 1.005, 0.995]


def history_and_tonight(config, spec_c4: float) -> str:
    """Five quiet nights, then tonight with SPEC at c=4 multiplied by spec_c4."""
    assert [v.label for v in sweep_variants(config)] == ["baseline", SPEC]
    store = ResultsStore(config.results_dir)
    shape = {"target": config.target.name, "model_path": config.server.model_path}
    for i, m in enumerate([*QUIET, 1.0]):
        run_id, start = night(i)
        for c in config.load.concurrency:
            spec_m = spec_c4 if (i == len(QUIET) and c == 4) else m
            write(
                store,
                [
                    level_row(
                        run_id, "baseline", c, baseline_tput(c) * m, started_at=start, **shape
                    ),
                    level_row(
                        run_id, SPEC, c, baseline_tput(c) * 1.2 * spec_m, started_at=start, **shape
                    ),
                ],
            )
    return night(len(QUIET))[0]


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
    assert result["policy"].startswith(f"Use {SPEC}")
    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    keys = {a.key for a in artifacts}
    assert {
        "specsweep-results",
        "specsweep-answer",
        "specsweep-report",
        "specsweep-regression-verdict",
    } <= keys
    table = next(a for a in artifacts if a.key == "specsweep-results")
    assert SPEC in str(table.data)


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
