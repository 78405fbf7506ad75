"""A missing machine part skips on a developer's machine and fails where required."""

import pytest
from _pytest.outcomes import Failed, Skipped

from tests.needs import missing


def test_missing_part_skips_unless_required(monkeypatch):
    monkeypatch.delenv("SPECSWEEP_REQUIRE_ALL", raising=False)
    monkeypatch.delenv("SPECSWEEP_REQUIRE_SSHD", raising=False)
    with pytest.raises(Skipped, match="no sshd"):
        missing("SSHD", "no sshd")
    monkeypatch.setenv("SPECSWEEP_REQUIRE_SSHD", "1")
    with pytest.raises(Failed, match="no sshd"):
        missing("SSHD", "no sshd")
    monkeypatch.delenv("SPECSWEEP_REQUIRE_SSHD")
    monkeypatch.setenv("SPECSWEEP_REQUIRE_ALL", "1")
    with pytest.raises(Failed, match="SPECSWEEP_REQUIRE_USERNS"):
        missing("USERNS", "no user namespaces")
