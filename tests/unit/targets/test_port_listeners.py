"""A listening socket psutil cannot name yet: looked at again, not taken for a stranger's.

psutil maps sockets to processes through /proc, so a socket of a process that is
starting or exiting can show up without a pid for a moment (it made an SSH kill-stale
test flaky). No real process can be made to hit that window on demand, so psutil's
answers are scripted here.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import psutil
import pytest

from specsweep.errors import StaleProcessError
from specsweep.targets import cleanup


def listening(port: int, pid: int | None) -> SimpleNamespace:
    return SimpleNamespace(status=psutil.CONN_LISTEN, laddr=SimpleNamespace(port=port), pid=pid)


def test_an_unnamed_listener_that_gets_its_pid_is_found(monkeypatch):
    answers = [[listening(4321, None)], [listening(4321, None)], [listening(4321, os.getpid())]]
    monkeypatch.setattr(cleanup.psutil, "net_connections", lambda kind: answers.pop(0))
    assert [p.pid for p in cleanup.port_listeners(4321)] == [os.getpid()]
    assert answers == []


def test_a_listener_that_stays_unnamed_belongs_to_someone_this_user_cannot_see(monkeypatch):
    monkeypatch.setattr(cleanup.psutil, "net_connections", lambda kind: [listening(4321, None)])
    with pytest.raises(StaleProcessError, match="port 4321 is in use by a process this user"):
        cleanup.port_listeners(4321, attempts=3)
