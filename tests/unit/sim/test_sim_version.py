"""The simulated sglang release (``SPECSWEEP_SIM_SGLANG_VERSION``) and its cheap probe."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from specsweep.sim import SIM_SGLANG_VERSION
from specsweep.sim.knobs import ENV_SGLANG_VERSION, SimKnobs
from specsweep.sim.version import (
    DEFAULT_SGLANG_VERSION,
    adaptive_runs_with_overlap,
    has_adaptive_flags,
    parse_version,
    server_info_version,
    simulated_version,
)


def test_default_is_0_5_23():
    assert simulated_version({}) == DEFAULT_SGLANG_VERSION == "0.5.23"
    assert SIM_SGLANG_VERSION == server_info_version(DEFAULT_SGLANG_VERSION) == "0.5.23-sim"
    assert SimKnobs.from_env({}).sglang_version == "0.5.23"
    assert ENV_SGLANG_VERSION == "SPECSWEEP_SIM_SGLANG_VERSION"


@pytest.mark.parametrize(
    ("raw", "shown", "parsed"),
    [("0.5.9", "0.5.9", (0, 5, 9)), (" 0.5.23 ", "0.5.23", (0, 5, 23)),
     ("0.5.11rc1", "0.5.11rc1", (0, 5, 11)), ("0.5.9.post2", "0.5.9.post2", (0, 5, 9)),
     ("0.6", "0.6", (0, 6, 0)), ("v0.5.10", "v0.5.10", (0, 5, 10))],
)  # fmt: skip
def test_knob_values(raw, shown, parsed):
    assert simulated_version({ENV_SGLANG_VERSION: raw}) == shown
    assert parse_version(shown) == parsed
    assert SimKnobs.from_env({ENV_SGLANG_VERSION: raw}).sglang_version == shown


@pytest.mark.parametrize("raw", ["latest", "0.5.23-sim", "5", "0.5.x", "0.5.9 beta", "0..5"])
def test_bad_values_name_the_variable(raw):
    with pytest.raises(ValueError, match=f"^{ENV_SGLANG_VERSION} must be an sglang version"):
        simulated_version({ENV_SGLANG_VERSION: raw})
    with pytest.raises(ValueError, match=ENV_SGLANG_VERSION):
        SimKnobs.from_env({ENV_SGLANG_VERSION: raw})


def test_what_each_release_has():
    assert not has_adaptive_flags("0.5.10") and has_adaptive_flags("0.5.11")
    assert has_adaptive_flags("0.5.11rc1")  # pre-releases count as their release
    assert not adaptive_runs_with_overlap("0.5.22") and adaptive_runs_with_overlap("0.5.23")
    assert adaptive_runs_with_overlap("0.6.0")


def _probe(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "from specsweep.sim.version import simulated_version; print(simulated_version())"
    clean = {k: v for k, v in os.environ.items() if k != ENV_SGLANG_VERSION}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True
    )


def test_the_probe_specsweep_runs_before_launching():
    assert _probe({}).stdout == "0.5.23\n"
    assert _probe({ENV_SGLANG_VERSION: "0.5.9"}).stdout == "0.5.9\n"
    bad = _probe({ENV_SGLANG_VERSION: "newest"})
    assert bad.returncode == 1 and "must be an sglang version" in bad.stderr


def test_the_probe_loads_nothing_heavy():
    code = (
        "import sys; from specsweep.sim.version import simulated_version; "
        "print(sorted(m for m in sys.modules if m.startswith(('aiohttp', 'yaml', 'specsweep'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "aiohttp" not in out and "yaml" not in out
    assert "specsweep.sim.engine" not in out and "specsweep.sim.launch_server" not in out
