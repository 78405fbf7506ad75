import pytest

from specsweep.config.file import parse_config
from specsweep.config.plan import plan_units, sweep_variants
from specsweep.errors import ConfigError
from tests.conftest import sim_config_data


def test_step_sweep_expands_to_baseline_plus_steps(tmp_path):
    cfg = parse_config(sim_config_data(tmp_path, 1, step_sweep={
        "algorithm": "EAGLE3", "draft_model_path": "d", "num_steps": [3, 1, 2]}))  # fmt: skip
    labels = [v.label for v in sweep_variants(cfg)]
    assert labels == ["baseline", "eagle3-s1-k1-d2", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4"]
    assert len(plan_units(cfg)) == 4 * len(cfg.load.concurrency)


def test_unset_cap_is_refused_with_the_reason(tmp_path):
    data = sim_config_data(tmp_path, 1)
    del data["server"]["max_running_requests"]
    with pytest.raises(ConfigError, match="silently caps it at 48"):
        sweep_variants(parse_config(data))


def test_unequal_caps_are_refused(tmp_path):
    data = sim_config_data(tmp_path, 1)
    data.pop("step_sweep")
    data["variants"] = [
        {},
        {"algorithm": "EAGLE3", "draft_model_path": "d", "num_steps": 2, "topk": 1,
         "max_running_requests": 48},
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="differs between variants"):
        sweep_variants(parse_config(data))


def test_invalid_step_in_sweep_names_the_step(tmp_path):
    step = {"draft_model_path": "d", "num_steps": [1, 2], "topk": 2, "num_draft_tokens": 4}
    data = sim_config_data(tmp_path, 1, step_sweep=step)
    with pytest.raises(ConfigError, match=r"num_steps=1: num_draft_tokens=4 exceeds"):
        sweep_variants(parse_config(data))


def test_spec_v2_with_topk_above_one_refused_before_launch(tmp_path):
    data = sim_config_data(tmp_path, 1, step_sweep={
        "draft_model_path": "d", "num_steps": [2], "topk": 2, "num_draft_tokens": 4,
        "spec_v2": True})  # fmt: skip
    with pytest.raises(ConfigError, match="only supports topk=1"):
        sweep_variants(parse_config(data))


def test_duplicate_names_and_empty_sweeps(tmp_path):
    data = sim_config_data(tmp_path, 1)
    data.pop("step_sweep")
    data["variants"] = [{}, {"name": "baseline"}]
    with pytest.raises(ConfigError, match="unique"):
        sweep_variants(parse_config(data))
    data["variants"] = []
    with pytest.raises(ConfigError, match="nothing to run"):
        sweep_variants(parse_config(data))


def test_grid_sweep_is_every_steps_topk_pair_with_the_draft_token_rule(tmp_path):
    grid = {"draft_model_path": "d", "num_steps": [1, 3, 8], "topk": [1, 4], "max_draft_tokens": 12}
    config = parse_config(sim_config_data(tmp_path, 1, step_sweep=None, grid_sweep=grid))
    labels = [v.label for v in sweep_variants(config)]
    assert labels == [
        "baseline",
        "eagle3-s1-k1-d2", "eagle3-s3-k1-d4", "eagle3-s8-k1-d9",  # chains: s+1
        "eagle3-s1-k4-d5", "eagle3-s3-k4-d12", "eagle3-s8-k4-d12",  # trees: s*k+1, capped
    ]  # fmt: skip


def test_search_shorthand_defaults_and_budget_rules(tmp_path):
    config = parse_config(sim_config_data(tmp_path, 1, search="adaptive"))
    assert config.search.adaptive and config.search.margin == 0.01
    assert config.search.skip_levels and config.search.max_launches is None
    assert not parse_config(sim_config_data(tmp_path, 1)).search.adaptive  # grid by default
    with pytest.raises(ConfigError, match="bound an adaptive search"):
        parse_config(sim_config_data(tmp_path, 1, search={"max_server_minutes": 30}))
    with pytest.raises(ConfigError, match="max_launches"):
        parse_config(sim_config_data(tmp_path, 1, search={"mode": "adaptive", "max_launches": 0}))
