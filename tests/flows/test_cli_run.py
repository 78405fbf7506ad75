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
    assert "eagle3-s2-k1-d3" in result.output and "vs no speculation" in result.output
    assert "simulated server" in result.output
    assert "Deploy " in result.output and "report:" in result.output  # the answer, not only data


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


def test_policy_verify_launches_only_the_exported_tiers_and_prints_the_verdict(tmp_path, port):
    # Time at scale 0.5 (decode steps of ~5 ms): at 0.2 a step is as short as a loaded
    # VM's wake-up after a sleep, and CI once measured speculation's gain at c=1 as 19%
    # instead of ~40% and exported no speculation at all (one launch, not two).
    path = write_config(
        tmp_path, port, load={"concurrency": [1, 16], "output_len": 32},
        step_sweep={"num_steps": [1, 3]},
        server={"env": {**sim_config_data(tmp_path, port)["server"]["env"],
                        "SPECSWEEP_SIM_TIME_SCALE": "0.5"}},
    )  # fmt: skip
    first = CliRunner().invoke(app, ["run", "step-sweep", "-c", str(path)])
    assert first.exit_code == 0, first.output
    (run_id,) = [p.name for p in (tmp_path / "work" / "logs").iterdir()]
    logs = tmp_path / "work" / "logs" / run_id
    statics = sorted(p.name for p in logs.iterdir())
    result = CliRunner().invoke(
        app, ["policy", "verify", run_id, "-c", str(path), "--no-default-tiers"]
    )
    assert result.exit_code == 0, result.output
    new = sorted(p.name for p in logs.iterdir() if p.name not in statics)
    # only the engine's steps 0 and the export were launched
    assert len(new) == 2 and "eagle3-adaptive-steps0.log" in new
    (label,) = [n.removesuffix(".log") for n in new if n != "eagle3-adaptive-steps0.log"]
    assert f"adaptive: {label} delivers" in result.output or (
        f"adaptive: {label} falls short" in result.output
    )
    assert "Turning speculation off in the engine costs" in result.output


def test_an_adaptive_flag_the_target_lacks_exits_2_before_any_launch(tmp_path, port):
    path = write_config(tmp_path, port, load={"concurrency": [1]})
    result = CliRunner().invoke(
        app, ["run", "step-sweep", "-c", str(path), "--set", "verify_policy=true",
              "--set", "server.env.SPECSWEEP_SIM_SGLANG_VERSION=0.5.9"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "target test-host has sglang 0.5.9: verify_policy needs --speculative-adaptive" in (
        " ".join(result.output.split())
    )
    assert not (tmp_path / "work" / "logs").exists()
