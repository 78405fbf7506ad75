"""An algorithm sweep from the CLI through the real flow, Prefect API and simulator (issue 31,
item 2)."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from specsweep.analysis.answer import analyze_run
from specsweep.cli import app
from specsweep.config.file import parse_config
from specsweep.flows.algorithm_sweep import algorithm_sweep_run_name
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def test_an_algorithm_sweep_measures_the_baseline_and_each_algorithm(tmp_path, port):
    sweep = {
        "ngram": {},
        "dflash": {"draft_model_path": "sim/dflash", "block_size": [8]},
    }
    data = sim_config_data(tmp_path, port, algorithm_sweep=sweep)
    # real text (NGRAM's acceptance depends on it), through /generate: its meta_info has
    # the accept lengths
    data["load"].update(prompts="builtin", endpoint="generate")
    config = parse_config(data)
    name = algorithm_sweep_run_name({"config": config.model_dump(mode="json")})
    assert name == "algorithm-sweep/test-host/algorithms=ngram,dflash/c=1,4"
    path = tmp_path / "algorithms.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["run", "algorithm-sweep", "-c", str(path)])
    assert result.exit_code == 0, result.output
    assert "ngram-w10-d12" in result.output and "vs no speculation" in result.output
    store = ResultsStore(config.results_dir)
    levels = store.read_levels(store.latest_run_id())
    assert sorted(set(levels["variant"])) == ["baseline", "dflash-b8", "ngram-w10-d12"]
    assert set(levels["status"]) == {"ok"}
    spec = levels[~levels["is_baseline"]]
    assert (spec["accept_length"] > 1.0).all()
    ngram = spec[spec["variant"] == "ngram-w10-d12"]
    assert "--speculative-ngram-max-bfs-breadth 10" in ngram["server_command"].iloc[0]
    assert (ngram["topk"] == 10).all()  # what sglang runs: topk = the max BFS breadth
    # the answer covers algorithms: the headline deploys a measured config, and acceptance
    # per prompt category is there for every algorithm
    answer = analyze_run(store, store.latest_run_id())
    deploy = answer.first.decision.deploy
    assert deploy.kind in ("static", "by-level", "none")  # no EAGLE chain: never tiers
    assert set(deploy.runs_at().values()) <= set(levels["variant"])
    cats = answer.categories[answer.categories["variant"] != "baseline"]
    assert set(cats["variant"]) == {"dflash-b8", "ngram-w10-d12"}
    assert set(cats["category"]) == {"chat", "code", "reasoning", "summarisation"}
    assert (cats["accept_length"] > 1.0).all()
