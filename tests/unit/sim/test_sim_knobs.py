"""Simulator knobs come from the environment only."""

from __future__ import annotations

import pytest

from specsweep.sim.knobs import ALL_ENV_VARS, SimKnobs


def test_defaults():
    k = SimKnobs.from_env({})
    assert (k.time_scale, k.load_seconds, k.warmup_seconds) == (1.0, 2.0, 1.0)
    assert k.crash is None and k.crash_after_s == 0.2 and k.profile == "default"
    assert k.health_seconds == 0.05 and k.seed is None


def test_parse_and_round_trip():
    env = {
        "SPECSWEEP_SIM_TIME_SCALE": "0.2",
        "SPECSWEEP_SIM_LOAD_SECONDS": "0.5",
        "SPECSWEEP_SIM_WARMUP_SECONDS": "0",
        "SPECSWEEP_SIM_CRASH": "Load",
        "SPECSWEEP_SIM_CRASH_AFTER_S": "1.5",
        "SPECSWEEP_SIM_PROFILE": "seeds-kimi-k2",
        "SPECSWEEP_SIM_SEED": "42",
    }
    k = SimKnobs.from_env(env)
    assert k == SimKnobs(0.2, 0.5, 0.0, 0.05, "load", 1.5, "seeds-kimi-k2", 42)
    assert SimKnobs.from_env(k.to_env()) == k
    assert set(k.to_env()) <= set(ALL_ENV_VARS)


@pytest.mark.parametrize(
    "env",
    [
        {"SPECSWEEP_SIM_TIME_SCALE": "fast"},
        {"SPECSWEEP_SIM_TIME_SCALE": "0"},
        {"SPECSWEEP_SIM_LOAD_SECONDS": "-1"},
        {"SPECSWEEP_SIM_CRASH": "later"},
    ],
)
def test_bad_values_name_the_variable(env):
    with pytest.raises(ValueError, match="SPECSWEEP_SIM_"):
        SimKnobs.from_env(env)
