"""What the UI shows of a run before and after it starts, on a real server with the
real `specsweep worker` (issue 19): the name and tags a run gets when it is created,
the nightly's upcoming runs named in the schedule's timezone, the deployment's limits,
the variant subflows' tags, and the simulator's GPUs read through its nvidia-smi.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import TARGET, PrefectStack
from tests.nightly_times import expected_nightly_name

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Only a guard against a worker that never labels (it labels every 2 s and before each
# poll): what the tests check is the order of events, named while still SCHEDULED.
HANG_GUARD_S = 300.0


def deployment(stack: PrefectStack, name: str) -> dict[str, Any]:
    return stack.get(f"/deployments/name/{name}/{name}")


def wait_named(stack: PrefectStack, run_id: str, name: str) -> dict[str, Any]:
    """The run once it carries `name`; it must get it while still SCHEDULED (named when it
    is created, not when it starts), however long the worker's cycle takes on this box."""
    guard = time.monotonic() + HANG_GUARD_S
    while True:
        run = stack.get(f"/flow_runs/{run_id}")
        if run["name"] == name:
            assert run["state_type"] == "SCHEDULED", run["state_type"]
            return run
        assert run["state_type"] == "SCHEDULED", ("left SCHEDULED unnamed", run["name"])
        assert time.monotonic() < guard, ("never named", run["name"], run["tags"])
        time.sleep(0.1)


def test_a_run_from_the_form_is_named_and_tagged_when_it_is_created(prefect_stack):
    """What the UI form posts: a random name, the form's parameters, a start in an hour
    (so no worker starts it while the test looks)."""
    dep = deployment(prefect_stack, "step-sweep")
    config = {**prefect_stack.config_data, "load": {**prefect_stack.config_data["load"]}}
    config["load"]["concurrency"] = [1, 2, 4]  # the levels changed in the form
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    run = prefect_stack.post(
        f"/deployments/{dep['id']}/create_flow_run",
        {
            "name": "zeta2-enya-p",
            "parameters": {"config": config, "run_id": "named-at-creation"},
            "state": {"type": "SCHEDULED", "state_details": {"scheduled_time": later}},
        },
    )
    try:
        assert run["name"] == "zeta2-enya-p"
        named = wait_named(prefect_stack, run["id"], f"step-sweep/{TARGET}/steps=2/c=1,2,4")
        assert set(named["tags"]) == {
            "specsweep", "step-sweep", f"target:{TARGET}", "run:named-at-creation"
        }  # fmt: skip
    finally:
        prefect_stack.delete(f"/flow_runs/{run['id']}")


def test_the_nightlys_upcoming_runs_are_named_in_the_schedules_timezone(prefect_stack):
    dep = deployment(prefect_stack, "nightly-regression")
    # what the scheduler service does every minute, now: insert the next nights' runs
    prefect_stack.post(f"/deployments/{dep['id']}/schedule", {})
    flt = {
        "deployments": {"id": {"any_": [dep["id"]]}},
        "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
    }
    runs = prefect_stack.post("/flow_runs/filter", flt)
    assert runs, "the scheduler created no runs"
    for run in runs:
        # 02:00, or 03:00 on the night 02:00 does not exist (the spring switch); the
        # frozen-date unit test checks those nights whatever today is
        named = wait_named(
            prefect_stack, run["id"], expected_nightly_name(TARGET, run["expected_start_time"])
        )
        assert {"auto-scheduled", "nightly", "specsweep", f"target:{TARGET}"} == set(named["tags"])
        assert named["created_by"]["display_value"] == (
            "Nightly at 02:00 Europe/Berlin (cron 0 2 * * *)"
        )


def test_the_deployment_shows_its_schedule_zone_and_limits(prefect_stack):
    nightly = deployment(prefect_stack, "nightly-regression")
    [schedule] = nightly["schedules"]
    assert schedule["slug"] == "Nightly at 02:00 Europe/Berlin (cron 0 2 * * *)"  # the UI's label
    assert "Nightly at 02:00 Europe/Berlin (cron 0 2 * * *)." in nightly["description"]
    for name in ("step-sweep", "topk-sweep", "matrix-sweep", "nightly-regression"):
        dep = deployment(prefect_stack, name)
        assert dep["global_concurrency_limit"]["limit"] == 1  # "Concurrency Limit: 1"
        assert dep["concurrency_options"]["collision_strategy"] == "ENQUEUE"
        assert f"global concurrency limit `specsweep-target-{TARGET}`." in dep["description"]
    limit = prefect_stack.get(f"/v2/concurrency_limits/specsweep-target-{TARGET}")
    assert limit["limit"] == 1
