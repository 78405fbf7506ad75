"""When nightly deployments run: one cron in one IANA timezone, chosen at deploy time."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

NIGHTLY_CRON = "0 2 * * *"
NIGHTLY_TIMEZONE = "Europe/Berlin"


@dataclass(frozen=True)
class NightlySchedule:
    cron: str = NIGHTLY_CRON
    timezone: str = NIGHTLY_TIMEZONE

    def __post_init__(self) -> None:
        ZoneInfo(self.timezone)  # an unknown zone fails at deploy time, not at 2 am
