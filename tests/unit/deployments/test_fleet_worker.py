"""The gate in front of a fleet host's worker polls: closed while its host is unavailable."""

from __future__ import annotations

import pytest

from specsweep.deployments.fleet_worker import HostGate
from specsweep.errors import HostUnavailable


class Check:
    def __init__(self) -> None:
        self.calls = 0
        self.broken: str | None = "sshd gone"

    def __call__(self) -> None:
        self.calls += 1
        if self.broken:
            raise HostUnavailable(f"host gpu-c failed its pre-flight check: {self.broken}")


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "lab-gpu-c.unavailable"


def test_no_marker_means_open_without_checking(marker):
    check = Check()
    assert HostGate("gpu-c", marker, check, recheck_s=60).is_open()
    assert check.calls == 0  # the host is checked only after a run found it unavailable


def test_a_marked_host_stays_closed_until_its_check_passes(marker, capsys):
    check = Check()
    gate = HostGate("gpu-c", marker, check, recheck_s=0)
    marker.write_text("host gpu-c failed its pre-flight check: refused")
    assert not gate.is_open() and not gate.is_open()
    assert check.calls == 2 and marker.read_text().endswith("sshd gone")
    assert capsys.readouterr().out.count("host gpu-c takes no work") == 1  # said once
    check.broken = None
    assert gate.is_open() and not marker.exists()
    assert "passes its pre-flight check again" in capsys.readouterr().out


@pytest.fixture(params=[3.0, 10_000_000.0], ids=["host-booted-3s-ago", "host-up-for-months"])
def uptime(request, monkeypatch):
    """time.monotonic() counts from boot: a worker restarted with its host reads a few
    seconds, one on a long-running host a large number; the gate must work with both."""
    clock = [request.param]
    monkeypatch.setattr("specsweep.deployments.fleet_worker.time.monotonic", lambda: clock[0])
    return clock


def test_a_marked_host_is_checked_at_once_whatever_the_uptime(marker, uptime):
    check = Check()
    gate = HostGate("gpu-c", marker, check, recheck_s=60)
    marker.write_text("x")
    assert not gate.is_open()
    assert check.calls == 1  # the first poll after a failed run checks the host
    uptime[0] += 59
    assert not gate.is_open() and check.calls == 1
    uptime[0] += 2
    check.broken = None
    assert gate.is_open() and check.calls == 2


def test_checks_are_spaced_by_recheck_s(marker):
    check = Check()
    gate = HostGate("gpu-c", marker, check, recheck_s=3600)
    marker.write_text("x")
    assert not gate.is_open() and not gate.is_open() and not gate.is_open()
    assert check.calls == 1  # polls come every second; checks do not


def test_without_a_config_a_marked_host_reopens_after_recheck_s(marker):
    gate = HostGate("gpu-c", marker, None, recheck_s=0)
    marker.write_text("refused")
    assert gate.is_open() and not marker.exists()  # the next run there finds out again
