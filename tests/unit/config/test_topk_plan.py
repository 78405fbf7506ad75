"""The topk sweep and the matrix sweep expand into the variants they promise."""

import pytest

from specsweep.config.file import parse_config
from specsweep.config.plan import plan_units, sweep_variants
from specsweep.errors import ConfigError
from tests.conftest import sim_config_data

TOPK = {"algorithm": "EAGLE3", "draft_model_path": "d", "num_steps": 3, "topk": [4, 1, 2]}


def topk_config(tmp_path, **topk):
    data = sim_config_data(tmp_path, 1, topk_sweep={**TOPK, **topk})
    data.pop("step_sweep")
    return parse_config(data)


def test_topk_sweep_follows_the_draft_token_rule(tmp_path):
    labels = [v.label for v in sweep_variants(topk_config(tmp_path), "topk-sweep")]
    # topk=1 is a chain (steps+1); wider trees draft steps*topk+1, capped at 16.
    assert labels == ["baseline", "eagle3-s3-k1-d4", "eagle3-s3-k2-d7", "eagle3-s3-k4-d13"]
    capped = topk_config(tmp_path, num_steps=5, max_draft_tokens=12)
    assert [v.resolved_num_draft_tokens for v in sweep_variants(capped, "topk-sweep")] == [
        None, 6, 11, 12,
    ]  # fmt: skip


def test_per_topk_mapping_and_spec_v2_twin(tmp_path):
    cfg = topk_config(tmp_path, num_draft_tokens={4: 8}, spec_v2_topk1=True)
    variants = sweep_variants(cfg, "topk-sweep")
    assert [v.label for v in variants] == [
        "baseline", "eagle3-s3-k1-d4", "eagle3-s3-k1-d4-v2", "eagle3-s3-k2-d7", "eagle3-s3-k4-d8",
    ]  # fmt: skip
    assert [v.uses_spec_v2 for v in variants] == [False, False, True, False, False]
    assert len(plan_units(cfg, "topk-sweep")) == 5 * len(cfg.load.concurrency)


@pytest.mark.parametrize(
    ("topk", "match"),
    [
        ({"num_draft_tokens": {4: 20}}, r"topk_sweep topk=4: num_draft_tokens=20 exceeds"),
        ({"num_draft_tokens": {1: 3}}, r"topk_sweep topk=1: with topk=1 sglang forces"),
        ({"num_draft_tokens": {8: 9}}, r"names topk \[8\] that are not in topk"),
        ({"topk": [2, 4], "spec_v2_topk1": True}, "add 1 to topk"),
        ({"topk": [2, 2]}, "topk repeat"),
        ({"draft_model_path": None}, "EAGLE3 needs draft_model_path"),
    ],
)
def test_invalid_topk_sweeps_are_refused_before_launch(tmp_path, topk, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        sweep_variants(topk_config(tmp_path, **topk), "topk-sweep")


def test_spec_v2_with_a_tree_is_refused(tmp_path):
    cfg = topk_config(tmp_path, env={"SGLANG_ENABLE_SPEC_V2": "1"})
    with pytest.raises(ConfigError, match=r"topk_sweep topk=2: .*only supports topk=1"):
        sweep_variants(cfg, "topk-sweep")


def test_presets_need_their_section_and_the_matrix_runs_them_all(tmp_path):
    cfg = topk_config(tmp_path)
    with pytest.raises(ConfigError, match="needs a step_sweep section"):
        sweep_variants(cfg, "step-sweep")
    data = sim_config_data(tmp_path, 1, topk_sweep={**TOPK, "topk": [1, 2]})
    data["variants"] = [{"name": "custom", "algorithm": "NEXTN", "num_steps": 1, "topk": 1}]
    both = parse_config(data)  # step_sweep num_steps=[2] plus topk 1,2 at num_steps=3
    assert [v.label for v in sweep_variants(both, "step-sweep")] == [
        "baseline", "eagle3-s2-k1-d3",
    ]  # fmt: skip
    assert [v.label for v in sweep_variants(both)] == [
        "baseline", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4", "eagle3-s3-k2-d7", "custom",
    ]  # fmt: skip
    data["variants"] = [{"name": "eagle3-s2-k1-d3"}]
    with pytest.raises(ConfigError, match="unique; repeated: eagle3-s2-k1-d3"):
        sweep_variants(parse_config(data))


def test_the_matrix_runs_a_variant_both_sweeps_contain_once(tmp_path):
    topk = {**TOPK, "topk": [1, 2], "draft_model_path": "sim/draft"}
    data = sim_config_data(tmp_path, 1, topk_sweep=topk)
    data["step_sweep"]["num_steps"] = [3]  # steps=3, topk=1: also the topk sweep's chain
    labels = [v.label for v in sweep_variants(parse_config(data))]
    assert labels == ["baseline", "eagle3-s3-k1-d4", "eagle3-s3-k2-d7"]
