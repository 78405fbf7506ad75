"""`specsweep run step-sweep` end to end: exit codes and what a user sees."""

import subprocess
import sys

import yaml
from typer.testing import CliRunner

from specsweep.cli import app
from tests.conftest import sim_config_data


def write_config(tmp_path, port, **sections):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sim_config_data(tmp_path, port, **sections)))
    return path


def test_run_prints_the_summary(tmp_path, port):
    path = write_config(tmp_path, port, load={"concurrency": [2]})
    result = CliRunner().invoke(app, ["run", "step-sweep", "-c", str(path)])
    assert result.exit_code == 0, result.output
    assert "eagle3-s2-k1-d3" in result.output and "speedup" in result.output
    assert "simulated server" in result.output
    assert "policy:" in result.output and "report:" in result.output  # the answer, not only data


def test_failed_variants_exit_1_and_say_why(tmp_path, port):
    # A real process, as a user runs it (its own ephemeral Prefect API).
    path = write_config(tmp_path, port, load={"concurrency": [1]})
    proc = subprocess.run(
        [sys.executable, "-m", "specsweep.cli", "run", "step-sweep", "-c", str(path),
         "--set", "server.env.SPECSWEEP_SIM_CRASH=load", "--set", "step_sweep.num_steps=[1]"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "variants failed: baseline, eagle3-s1-k1-d2" in out
    assert "failed variant baseline: ServerDiedError: server process exited" in out
