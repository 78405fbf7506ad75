"""`specsweep policy export`: a stored run's answer as SGLang tiers, the command that deploys
them, and the refusals (no Prefect, no server: Parquet only)."""

import json

import yaml
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.results.rows import RunContext
from specsweep.results.runs import run_row
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data
from tests.synthetic_levels import T0, static_rows, write

runner = CliRunner()
RUN = "20261101T020000Z-abcdef"
# steps 2 wins 1.4x at c=1, 1.2x at c=8, loses 0.8x at c=32: no speculation from the crossing
RATIOS = {2: {1: 1.4, 8: 1.2, 32: 0.8}}


def stored_run(tmp_path, *, ratios=RATIOS, with_config=True):
    store = ResultsStore(tmp_path / "results")
    rows = static_rows(RUN, ratios)
    write(store, rows)
    if with_config:
        data = sim_config_data(tmp_path, 31000, step_sweep={"num_steps": [2], "draft_model_path":
                               "draft/eagle3"}, results_dir=str(tmp_path / "results"))  # fmt: skip
        config = parse_config(data)
        ctx = RunContext(RUN, "step_sweep", "test", "gpu-host")
        variants = sweep_variants(config, "step-sweep")
        store.write_run(run_row(config, ctx, variants, {}, T0, status="completed"))
    return store


def test_export_prints_the_tiers_alone_on_stdout_and_how_to_deploy_them(tmp_path):
    stored_run(tmp_path)
    result = runner.invoke(
        app, ["policy", "export", RUN, "--results-dir", str(tmp_path / "results")]
    )
    assert result.exit_code == 0, result.output
    tiers = json.loads(result.stdout)
    assert tiers["1"] == {"candidate_steps": [2]}
    last = max((k for k in tiers if k.isdigit()), key=int)
    assert tiers[last] == {"candidate_steps": [0]}  # no speculation at the top
    assert 8 < int(last) <= 32  # between the levels where the curves cross
    assert tiers["_specsweep"]["run_id"] == RUN
    assert "batch 1-" in result.stderr and "deploy with:" in result.stderr
    assert "--speculative-adaptive --speculative-adaptive-config tiers.json" in result.stderr


def test_export_to_a_file_names_it_in_the_server_command(tmp_path):
    stored_run(tmp_path)
    out = tmp_path / "deploy" / "tiers.json"
    result = runner.invoke(
        app, ["policy", "export", RUN, "--results-dir", str(tmp_path / "results"), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["1"] == {"candidate_steps": [2]}
    assert f"--speculative-adaptive-config {out.resolve()}" in result.stdout
    assert "--speculative-draft-model-path draft/eagle3" in result.stdout
    assert "--speculative-num-steps 2" in result.stdout  # the middle of the candidates [0, 2]


def test_a_run_without_its_config_still_exports_and_says_what_to_add(tmp_path):
    stored_run(tmp_path, with_config=False)
    out = tmp_path / "t.json"
    args = ["policy", "export", RUN, "--results-dir", str(tmp_path / "results"), "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "cannot be rebuilt" in result.stdout and out.is_file()


def test_refusals_exit_1_and_say_why(tmp_path):
    stored_run(tmp_path, ratios={2: {1: 0.9, 8: 0.8}})  # speculation never wins
    args = ["policy", "export", RUN, "--results-dir", str(tmp_path / "results")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert f"run {RUN}: cannot export a tier config: speculation never wins" in result.stderr
    assert result.stdout == ""
    missing = runner.invoke(app, ["policy", "export", "nope", *args[3:]])
    assert missing.exit_code == 1 and "run nope has no level rows" in missing.stderr
    bad = runner.invoke(app, [*args, "--format", "vllm"])
    assert bad.exit_code == 2 and "--format vllm: use one of sglang-adaptive" in bad.stderr


def test_policy_verify_refuses_an_unknown_run_before_anything_starts(tmp_path):
    stored_run(tmp_path)
    config = tmp_path / "sweep.yaml"
    data = sim_config_data(tmp_path, 31000, results_dir=str(tmp_path / "results"))
    config.write_text(json.dumps(data))
    result = runner.invoke(app, ["policy", "verify", "nope", "-c", str(config)])
    assert result.exit_code == 1 and "no run nope under" in result.stderr


def test_bad_adaptive_input_exits_2_naming_the_field_and_the_fix(tmp_path):
    eagle = {"algorithm": "EAGLE3", "draft_model_path": "d"}
    cases = [
        ({"adaptive": {"tiers": {"x": [1]}}},
         "variants.0.adaptive.tiers: tier key 'x' is not a batch size"),
        ({"adaptive": {"tiers": {1: []}}},
         "variants.0.adaptive.tiers.1.candidate_steps: List should have at least 1"),
        ({"adaptive": {"tiers": {1: [-1]}}}, "greater than or equal to 0"),
        ({"adaptive": True, "topk": 2, "num_steps": 3, "num_draft_tokens": 4},
         "needs topk=1 (a chain); got topk=2"),
        ({"adaptive": {"tiers": {1: [3]}}, "num_steps": 2},
         "num_steps=2 is not among the tiers' candidate steps [3]"),
        ({"adaptive": True, "algorithm": "STANDALONE"},
         "EAGLE or EAGLE3 only; with algorithm STANDALONE"),
    ]  # fmt: skip
    for fields, says in cases:
        data = sim_config_data(tmp_path, 31000)
        data.pop("step_sweep")
        data["variants"] = [{**eagle, **fields}]
        path = tmp_path / "sweep.yaml"
        path.write_text(yaml.safe_dump(data))
        result = runner.invoke(app, ["plan", "-c", str(path)])
        assert result.exit_code == 2, (fields, result.output)
        assert says in " ".join(result.output.split()), (fields, result.output)
