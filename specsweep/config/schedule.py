"""When nightly deployments run: one cron in one IANA timezone, chosen at deploy time.

Prefect's UI writes a cron schedule as "At 02:00 AM every day" and lists the upcoming
runs in the browser's timezone, so the timezone is nowhere on the page; `describe` is
the wording the deployment's description and its schedule label show instead, and
`local_time` is how a run name states its scheduled time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

NIGHTLY_CRON = "0 2 * * *"
NIGHTLY_TIMEZONE = "Europe/Berlin"

_DAILY = re.compile(r"^(\d{1,2}) (\d{1,2}) \* \* \*$")  # minute hour, every day


@dataclass(frozen=True)
class NightlySchedule:
    cron: str = NIGHTLY_CRON
    timezone: str = NIGHTLY_TIMEZONE

    def __post_init__(self) -> None:
        ZoneInfo(self.timezone)  # an unknown zone fails at deploy time, not at 2 am

    def describe(self) -> str:
        """'Nightly at 02:00 Europe/Berlin (cron 0 2 * * *)'; any other cron as itself."""
        cron = " ".join(self.cron.split())
        daily = _DAILY.match(cron)
        if daily and int(daily[1]) < 60 and int(daily[2]) < 24:
            at = f"{int(daily[2]):02d}:{int(daily[1]):02d}"
            return f"Nightly at {at} {self.timezone} (cron {cron})"
        return f"Cron {cron} in {self.timezone}"


def local_time(when: datetime, timezone: str | None) -> str:
    """'2026-12-03 02:00 Europe/Berlin': a UTC instant as the schedule's wall clock reads it
    (a naive datetime counts as UTC; no timezone means UTC)."""
    zone = timezone or "UTC"
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):  # a name must never fail a run: say UTC
        zone, tz = "UTC", ZoneInfo("UTC")
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return f"{aware.astimezone(tz):%Y-%m-%d %H:%M} {zone}"
