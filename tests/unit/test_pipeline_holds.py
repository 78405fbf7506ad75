"""A variant's phase record counts every hold of its server in the run: a relaunch (a
retried task, a search killed and resumed) adds to what the run paid instead of
overwriting it, and a hold whose process was killed ends at the last level it wrote. The
search's server-time budget and its report read the same sum (no server is started here:
a host that answers levels from hand-made passes stands in)."""

from __future__ import annotations

import time

import pytest

from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.pipeline import ServerState, VariantServer
from specsweep.results.phases import carried_over, held_seconds
from specsweep.results.rows import RunContext
from specsweep.search.planner import RunSoFar
from specsweep.targets.server_facts import ServerFacts
from tests.conftest import sim_config_data
from tests.unit.test_pipeline_calibration import LevelHost


def _server(config, host: LevelHost) -> VariantServer:
    variant = sweep_variants(config)[1]
    server = VariantServer.for_variant(config, variant, RunContext("r1", "step_sweep", "t", "h"))
    server.host = host  # type: ignore[assignment]
    server.state = ServerState.READY
    server.facts = ServerFacts("0.0-sim", True)
    return server


def test_a_relaunch_adds_its_hold_to_the_killed_ones(tmp_path):
    config = parse_config(
        sim_config_data(tmp_path, 1, load={"concurrency": [1, 4], "calibrate_drift": False})
    )
    host = LevelHost([0.01])
    first = _server(config, host)
    first.__enter__()  # the hold begins ...
    first.phases.seconds["launch_to_ready_s"] = 7.0
    first.benchmark_level(1)  # ... one level is written, then the process is SIGKILLed
    store, label = first.store, first.label
    killed = store.read_phase_record("r1", label, "h")
    assert killed is not None and "held_until_unix" not in killed
    assert killed["holds"] == 1 and killed["alive_unix"] >= killed["held_from_unix"]
    lived = killed["alive_unix"] - killed["held_from_unix"]
    assert held_seconds(killed) == pytest.approx(lived)  # not until now: it is dead

    time.sleep(0.05)  # the resume comes later: the gap is no server's
    second = _server(config, host)
    with second:
        second.phases.seconds["launch_to_ready_s"] += 5.0
        second.benchmark_level(4)
    record = store.read_phase_record("r1", label, "h")
    assert record is not None and record["holds"] == 2
    assert record["held_before_s"] == pytest.approx(lived, abs=1e-3)
    assert record["held_from_unix"] > killed["alive_unix"]
    assert record["launch_to_ready_s"] == pytest.approx(12.0)  # both launches
    assert "benchmark_s" in record and record["benchmark_s"] >= killed["benchmark_s"]
    last = record["held_until_unix"] - record["held_from_unix"]
    assert held_seconds(record) == pytest.approx(lived + last, abs=1e-3)
    # the search's budget reads the same sum
    so_far = RunSoFar(store.read_levels("r1"), None, store.read_phase_files("r1"))
    assert so_far.held_s() == pytest.approx(lived + last, abs=1e-3)


def test_a_hold_known_to_be_up_counts_until_now_and_a_first_launch_carries_nothing():
    record = {"held_from_unix": 100.0, "alive_unix": 130.0, "held_before_s": 20.0, "holds": 2.0}
    assert held_seconds(record) == 50.0
    assert held_seconds(record, now=200.0) == 120.0
    assert held_seconds({"held_before_s": 20.0}) == 20.0
    assert carried_over(None) == ({}, {"holds": 1.0})
    seconds, held = carried_over(
        record
        | {"launch_to_ready_s": 3.0, "gpu_mib_at_start": 512.0, "gpu_mib_after_teardown": 1.0}
    )
    assert seconds == {"launch_to_ready_s": 3.0}
    assert held == {"held_before_s": 50.0, "holds": 3.0, "gpu_mib_at_start": 512.0}
