"""When the nightly runs by the wall clock of its zone, computed independently of the code
under test: 02:00 on a normal night, and where 02:00 does not exist (the spring switch to
summer time, e.g. 2027-03-28 in Europe/Berlin) the first instant after the gap, 03:00.
The e2e name test and the frozen-date test both check names against it."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo


def wall_clock_exists(day: datetime, hour: int, minute: int, zone: ZoneInfo) -> bool:
    """The local time `hour:minute` happens on `day` (a spring-forward gap skips it)."""
    local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
    back = local.astimezone(UTC).astimezone(zone)
    return (back.hour, back.minute) == (hour, minute)


def expected_local_start(start: datetime, zone: ZoneInfo, hour: int = 2, minute: int = 0):
    """(hour, minute) a run of a daily `hour:minute` cron that started at `start` must show:
    the cron's time, or the end of the gap when that time does not exist on its day."""
    local = start.astimezone(zone)
    if wall_clock_exists(local, hour, minute, zone):
        return hour, minute
    skipped = datetime(local.year, local.month, local.day, hour, minute, tzinfo=zone)
    after = skipped.astimezone(UTC).astimezone(zone)  # the gap's end, by the zone's rules
    return after.hour, after.minute


def expected_nightly_name(target: str, expected_start_time: str, zone: str = "Europe/Berlin"):
    """The name a scheduled nightly must carry, from its own `expected_start_time` (Prefect's
    ISO string): its start in the schedule's zone, which must be the hour the cron gives
    that night (`expected_local_start`). The e2e name test and the UI test both use it."""
    tz = ZoneInfo(zone)
    start = datetime.fromisoformat(expected_start_time).astimezone(tz)
    assert (start.hour, start.minute) == expected_local_start(start, tz), start
    return f"nightly-regression/{target}/{start:%Y-%m-%d %H:%M} {zone}"
