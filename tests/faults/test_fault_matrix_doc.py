"""docs/faults.md is the fault matrix rendered from the fault tests: never stale."""

from tests.faults.registry import DOC, MUTATIONS, collect, render


def test_the_documented_fault_matrix_matches_the_tests():
    faults = collect()
    names = {f.name for f in faults}
    assert {"Crash during weight loading", "SSH connection lost mid-level"} <= names
    assert len(faults) >= 14
    assert set(MUTATIONS) <= names  # every recorded mutation names a row
    assert DOC.read_text() == render(faults), (
        "docs/faults.md is stale: run `.venv/bin/python -m tests.faults.registry --write`"
    )
