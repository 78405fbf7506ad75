"""Simulator knobs come from the environment only, and every one is documented."""

from __future__ import annotations

import pytest

import specsweep.sim.knobs as knobs_module
from specsweep.sim.knobs import ALL_ENV_VARS, SimKnobs


def test_defaults():
    k = SimKnobs.from_env({})
    assert k.time_scale == 1.0 and k.profile == "default" and k.seed is None
    assert (k.load_seconds, k.warmup_seconds, k.health_seconds) == (None, None, None)
    assert k.crash is None and k.crash_after_s == 0.2 and k.hang is None
    assert (k.error_every, k.error_rate, k.error_status) == (0, 0.0, 500)
    assert not k.port_in_use and k.orphan is None and k.gpu_release_s == 0.3


def test_parse():
    env = {
        "SPECSWEEP_SIM_TIME_SCALE": "0.2",
        "SPECSWEEP_SIM_LOAD_SECONDS": "0.5",
        "SPECSWEEP_SIM_WARMUP_SECONDS": "0",
        "SPECSWEEP_SIM_CRASH": "Load",
        "SPECSWEEP_SIM_CRASH_AFTER_S": "1.5",
        "SPECSWEEP_SIM_PROFILE": "seeds-kimi-k2",
        "SPECSWEEP_SIM_SEED": "42",
        "SPECSWEEP_SIM_HANG": "warmup",
        "SPECSWEEP_SIM_HEALTH_FLAP": "2",
        "SPECSWEEP_SIM_ERROR_EVERY": "3",
        "SPECSWEEP_SIM_ERROR_STATUS": "503",
        "SPECSWEEP_SIM_PORT_IN_USE": "true",
        "SPECSWEEP_SIM_ORPHAN": "1",
        "SPECSWEEP_SIM_GPU_STATE": "/tmp/x",
    }
    k = SimKnobs.from_env(env)
    assert (k.time_scale, k.load_seconds, k.warmup_seconds) == (0.2, 0.5, 0.0)
    assert (k.crash, k.crash_after_s, k.profile, k.seed) == ("load", 1.5, "seeds-kimi-k2", 42)
    assert (k.hang, k.health_flap, k.error_every, k.error_status) == ("warmup", 2, 3, 503)
    assert k.port_in_use and k.orphan == "scheduler" and k.gpu_state == "/tmp/x"
    assert SimKnobs.from_env({"SPECSWEEP_SIM_ORPHAN": "all"}).orphan == "all"


def test_crash_after_requests_implies_a_serve_crash():
    k = SimKnobs.from_env({"SPECSWEEP_SIM_CRASH_AFTER_REQUESTS": "3"})
    assert k.crash == "serve" and k.crash_after_requests == 3


def test_durations_scale_the_profile_unless_set():
    k = SimKnobs.from_env({"SPECSWEEP_SIM_TIME_SCALE": "0.1"})
    assert k.durations(500, 10, 1.0) == pytest.approx((50, 1, 0.1))
    k = SimKnobs.from_env({"SPECSWEEP_SIM_TIME_SCALE": "0.1", "SPECSWEEP_SIM_LOAD_SECONDS": "2"})
    assert k.durations(500, 10, 1.0) == pytest.approx((2, 1, 0.1))
    slow = SimKnobs.from_env(
        {"SPECSWEEP_SIM_HEALTH_SECONDS": "0.01", "SPECSWEEP_SIM_SLOW_HEALTH_S": "3"}
    )
    assert slow.durations(1, 1, 1)[2] == 3  # the fault wins


@pytest.mark.parametrize(
    "env",
    [
        {"SPECSWEEP_SIM_TIME_SCALE": "fast"},
        {"SPECSWEEP_SIM_TIME_SCALE": "0"},
        {"SPECSWEEP_SIM_LOAD_SECONDS": "-1"},
        {"SPECSWEEP_SIM_CRASH": "later"},
        {"SPECSWEEP_SIM_HANG": "serve"},
        {"SPECSWEEP_SIM_ERROR_STATUS": "404"},
        {"SPECSWEEP_SIM_ERROR_RATE": "1.5"},
        {"SPECSWEEP_SIM_ORPHAN": "some"},
        {"SPECSWEEP_SIM_ERROR_EVERY": "x"},
        {"SPECSWEEP_SIM_CRASH": "load", "SPECSWEEP_SIM_CRASH_AFTER_REQUESTS": "2"},
    ],
)
def test_bad_values_name_the_variable(env):
    with pytest.raises(ValueError, match="SPECSWEEP_SIM_"):
        SimKnobs.from_env(env)


def test_every_knob_is_documented_in_the_module_docstring():
    doc = knobs_module.__doc__ or ""
    assert len(ALL_ENV_VARS) >= 20
    missing = [name for name in ALL_ENV_VARS if name not in doc.replace("..._", "SPECSWEEP_SIM_")]
    assert not missing, f"undocumented knobs: {missing}"
