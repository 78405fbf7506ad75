from pathlib import Path

from typer.testing import CliRunner

from specsweep.cli import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
runner = CliRunner()


def test_plan_prints_every_command_without_launching():
    result = runner.invoke(app, ["plan", "-c", str(EXAMPLES / "gpu-host.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output.count("sglang.launch_server") == 5
    assert "--speculative-num-steps 5" in result.output
    assert "5 variants x 8 levels" in result.output


def test_invalid_config_exits_2_with_the_reason():
    result = runner.invoke(
        app, ["plan", "-c", str(EXAMPLES / "sim.yaml"), "--set", "step_sweep.topk=2"]
    )
    assert result.exit_code == 2
    assert "needs num_draft_tokens" in result.output


def test_summary_without_runs_fails_clearly(tmp_path):
    result = runner.invoke(app, ["summary", "--results-dir", str(tmp_path)])
    assert result.exit_code == 1 and "no runs under" in result.output


def test_plan_describes_an_adaptive_search_and_refuses_a_budget_on_a_grid():
    grid = ["--set", "step_sweep=null", "--set", "topk_sweep=null",
            "--set", "grid_sweep={draft_model_path: sim/d}"]  # fmt: skip
    result = runner.invoke(
        app,
        ["plan", "-c", str(EXAMPLES / "sim.yaml"), *grid,
         "--set", "search={mode: adaptive, max_launches: 6}"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "25 variants x 3 levels" in text  # examples/sim.yaml: c=1, 2, 8
    assert (
        "search: adaptive over these 25 variants: baseline, eagle3-s1-k1-d2, eagle3-s8-k1-d9"
        in text
    )
    assert "max_launches 6" in text
    result = runner.invoke(
        app, ["plan", "-c", str(EXAMPLES / "sim.yaml"), "--set", "search={max_launches: 6}"]
    )
    assert result.exit_code == 2 and "bound an adaptive search" in result.output
