"""Run names and tags: one pure function per flow, the same at creation and at start."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from prefect.client.schemas.objects import CreatedBy, DeploymentSchedule
from prefect.client.schemas.schedules import CronSchedule

from specsweep.config.file import parse_config
from specsweep.config.schedule import NightlySchedule, local_time
from specsweep.flows.matrix_sweep import matrix_sweep_run_name, run_tags, short_list
from specsweep.flows.nightly_regression import nightly_run_name, schedule_timezone
from specsweep.flows.step_sweep import step_sweep_run_name
from specsweep.flows.topk_sweep import topk_sweep_run_name
from tests.conftest import sim_config_data


def params(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A run's parameters as the API holds them: the config as plain JSON."""
    return {"config": sim_config_data(tmp_path, 31000, **sections)}


def test_the_step_sweep_name_follows_what_the_form_changed(tmp_path):
    base = params(tmp_path, step_sweep={"num_steps": [1, 2, 3]}, load={"concurrency": [1, 2, 4]})
    assert step_sweep_run_name(base) == "step-sweep/test-host/steps=1,2,3/c=1,2,4"
    levels = params(tmp_path, step_sweep={"num_steps": [1, 2, 3]}, load={"concurrency": [8, 16]})
    assert step_sweep_run_name(levels) == "step-sweep/test-host/steps=1,2,3/c=8,16"
    shapes = params(tmp_path, load={"concurrency": [1], "input_len": [512, 4096]})
    assert (
        step_sweep_run_name(shapes) == "step-sweep/test-host/steps=2/c=1/in512-out16,in4096-out16"
    )


def test_the_validated_config_names_the_run_as_its_json_does(tmp_path):
    """The flow names itself from its validated parameters, the labeller from the API's
    JSON: both must give the same name, or a run would be renamed when it starts."""
    raw = params(tmp_path, load={"concurrency": [1, 2, 4, 8, 16, 32, 64]})
    validated = {"config": parse_config(raw["config"]), "run_id": None}
    assert step_sweep_run_name(validated) == step_sweep_run_name(raw)
    assert step_sweep_run_name(raw) == "step-sweep/test-host/steps=2/c=1,2,4,8,+3"


def test_topk_and_matrix_names_show_their_variants_and_levels(tmp_path):
    topk = {"algorithm": "EAGLE3", "draft_model_path": "sim/d", "num_steps": 3, "topk": [1, 2, 4]}
    data = params(tmp_path, topk_sweep=topk)
    assert topk_sweep_run_name(data) == "topk-sweep/test-host/topk=1,2,4/c=1,4"
    assert matrix_sweep_run_name(data).startswith("matrix-sweep/test-host/baseline,")
    assert matrix_sweep_run_name(data).endswith("/c=1,4")
    assert step_sweep_run_name(params(tmp_path, step_sweep=None)) == (
        "step-sweep/test-host/steps=?/c=1,4"
    )


def test_a_config_that_does_not_validate_still_names_its_run(tmp_path):
    data = params(tmp_path, load={"concurrency": []})
    assert step_sweep_run_name(data) == "step-sweep/test-host/invalid-config"
    assert nightly_run_name({}, None) == "nightly-regression/?/unscheduled"
    assert run_tags({"config": {"target": {"name": "gpu-a"}}}) == ["target:gpu-a"]


def test_short_list_keeps_four_items():
    assert short_list([1, 2, 3, 4]) == "1,2,3,4"
    assert short_list(list(range(1, 8))) == "1,2,3,4,+3"


@pytest.mark.parametrize(
    ("utc", "local"),
    [
        (datetime(2026, 12, 3, 1, 0, tzinfo=UTC), "2026-12-03 02:00 Europe/Berlin"),  # CET
        (datetime(2026, 7, 3, 0, 0, tzinfo=UTC), "2026-07-03 02:00 Europe/Berlin"),  # CEST
    ],
)
def test_the_nightly_name_is_the_scheduled_time_in_the_schedules_zone(tmp_path, utc, local):
    assert nightly_run_name(params(tmp_path), utc, "Europe/Berlin") == (
        f"nightly-regression/test-host/{local}"
    )


def test_the_nightly_name_without_a_schedule_says_utc(tmp_path):
    utc = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
    assert (
        nightly_run_name(params(tmp_path), utc)
        == "nightly-regression/test-host/2026-12-03 01:00 UTC"
    )
    assert local_time(utc, "Not/AZone") == "2026-12-03 01:00 UTC"


def test_the_timezone_is_the_creating_schedules():
    def entry(zone: str) -> DeploymentSchedule:
        return DeploymentSchedule(
            id=uuid4(), schedule=CronSchedule(cron="0 2 * * *", timezone=zone)
        )

    berlin, tokyo = entry("Europe/Berlin"), entry("Asia/Tokyo")
    by_tokyo = CreatedBy(id=tokyo.id, type="SCHEDULE", display_value="nightly")
    assert schedule_timezone([berlin, tokyo], by_tokyo) == "Asia/Tokyo"
    user = CreatedBy(id=uuid4(), type="USER", display_value="someone")
    assert schedule_timezone([berlin, tokyo], user) == "Europe/Berlin"  # a run from the form
    assert schedule_timezone([berlin], None) == "Europe/Berlin"
    assert schedule_timezone([], None) is None


def test_run_tags_name_the_target_and_the_run_id(tmp_path):
    assert run_tags(params(tmp_path)) == ["target:test-host"]
    assert run_tags({**params(tmp_path), "run_id": "ui-run"}) == ["target:test-host", "run:ui-run"]


def test_the_schedule_says_its_time_and_zone():
    assert NightlySchedule().describe() == "Nightly at 02:00 Europe/Berlin (cron 0 2 * * *)"
    assert NightlySchedule("30 23 * * *", "Asia/Tokyo").describe() == (
        "Nightly at 23:30 Asia/Tokyo (cron 30 23 * * *)"
    )
    assert NightlySchedule("5 3 * * 1").describe() == "Cron 5 3 * * 1 in Europe/Berlin"


@pytest.mark.parametrize("today", ["2027-03-26", "2027-10-29", "2026-12-01"])
def test_the_nightlys_upcoming_names_at_a_frozen_date_around_the_switch(tmp_path, today):
    """What the scheduler service inserts on `today` (three nights ahead, from Prefect's own
    cron schedule), named as the worker names them. From 2027-03-26 the third night is the
    spring switch: 02:00 does not exist in Berlin and the run starts at 03:00 CEST, named
    so; on the autumn switch 02:00 happens twice and the run starts at the first."""
    import asyncio
    from zoneinfo import ZoneInfo

    from prefect.server.schemas.schedules import CronSchedule as ServerCron

    from tests.nightly_times import expected_local_start

    berlin = ZoneInfo(NightlySchedule().timezone)
    schedule = ServerCron(cron=NightlySchedule().cron, timezone=NightlySchedule().timezone)
    now = datetime.fromisoformat(today).replace(hour=12, tzinfo=UTC)  # the frozen clock
    starts = asyncio.run(schedule.get_dates(n=3, start=now))
    assert len(starts) == 3 and all(s > now for s in starts)
    for start in starts:
        local = start.astimezone(berlin)
        assert (local.hour, local.minute) == expected_local_start(start, berlin)
        assert nightly_run_name(params(tmp_path), start, "Europe/Berlin") == (
            f"nightly-regression/test-host/{local:%Y-%m-%d %H:%M} Europe/Berlin"
        )
    if today == "2027-03-26":
        shown = [nightly_run_name(params(tmp_path), s, "Europe/Berlin")[-30:] for s in starts]
        assert shown == [
            "2027-03-27 02:00 Europe/Berlin",
            "2027-03-28 03:00 Europe/Berlin",  # the spring switch: no 02:00 that night
            "2027-03-29 02:00 Europe/Berlin",
        ]
