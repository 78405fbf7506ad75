"""The Hosts section of a fleet run with a baseline plan: the calibration of every host."""

from __future__ import annotations

from specsweep.analysis.answer import analyze_run
from specsweep.analysis.baselines import OWN, REFERENCE, HostRole, calibrate, plan_row
from specsweep.report.render import hosts_markdown
from tests.unit.analysis.test_fleet_baselines import SHAPE, _fleet_rows, _store

FACTS = {"gpu_name": "NVIDIA H200", "gpu_count": 1}


def test_the_hosts_section_shows_each_hosts_calibration(tmp_path):
    store = _store(tmp_path, _fleet_rows("r"))
    levels = store.read_levels("r")
    check = calibrate(levels, "gpu-b", "gpu-a", 2, SHAPE, 0.02)
    store.write_host_plan(
        plan_row("r", "gpu-a", "per_gpu_kind", HostRole(REFERENCE, "gpu-a"), 0, FACTS)
    )
    store.write_host_plan(
        plan_row("r", "gpu-b", "per_gpu_kind", HostRole(OWN, "gpu-b"), 1, FACTS, **check)
    )
    text = "\n".join(hosts_markdown(analyze_run(store, "r"), {}))
    assert "Baselines (fleet.baseline per_gpu_kind)" in text
    assert "gpu-a measured the 1x NVIDIA H200's baseline." in text
    assert (
        "gpu-b: calibration at c=2 -20.0%" in text and "failed: measures its own baseline" in text
    )
    assert "### Baselines: one row per fleet host" in text
    assert "| gpu-b | 1x NVIDIA H200 | its own baseline | gpu-b | c=2 in128-out64 | -20.0%" in text
    assert "its speedups compare hosts too" not in text
