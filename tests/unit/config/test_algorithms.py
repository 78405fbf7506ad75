"""Every speculative algorithm sglang 0.5.23's parser accepts is a variant kind (issue 31,
item 1): accepted with its parameters, named stably, launched with its own flags, refused
before launch with sglang's reason where sglang would refuse or override, and gated on the
sglang version that has it."""

import shlex

import pytest
import yaml
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.config import ServerSpec, Variant
from specsweep.config.command import build_launch_command
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.config.versions import check_version
from specsweep.errors import ConfigError, UnsupportedByVersion
from tests.conftest import sim_config_data

SERVER = ServerSpec(model_path="m", max_running_requests=32)

# (fields, the derived name, the flags after --speculative-algorithm X)
ACCEPTED = [
    (
        {"algorithm": "NGRAM"},
        "ngram-w10-d12",
        "--speculative-num-draft-tokens 12 --speculative-ngram-min-bfs-breadth 1 "
        "--speculative-ngram-max-bfs-breadth 10 --speculative-ngram-match-type BFS "
        "--speculative-ngram-max-trie-depth 18 --speculative-ngram-capacity 10000000",
    ),
    (
        {
            "algorithm": "NGRAM",
            "num_draft_tokens": 8,
            "ngram": {
                "max_bfs_breadth": 4,
                "match_type": "PROB",
                "external_corpus_path": "corpus dir/c.jsonl",
                "external_sam_budget": 3,
            },
        },
        "ngram-w4-d8-prob-corpus",
        "--speculative-num-draft-tokens 8 --speculative-ngram-min-bfs-breadth 1 "
        "--speculative-ngram-max-bfs-breadth 4 --speculative-ngram-match-type PROB "
        "--speculative-ngram-max-trie-depth 18 --speculative-ngram-capacity 10000000 "
        "--speculative-ngram-external-corpus-path 'corpus dir/c.jsonl' "
        "--speculative-ngram-external-sam-budget 3 "
        "--speculative-ngram-external-corpus-max-tokens 10000000",
    ),
    (
        {"algorithm": "DFLASH", "draft_model_path": "z-lab/dflash", "block_size": 16},
        "dflash-b16",
        "--speculative-draft-model-path z-lab/dflash --speculative-dflash-block-size 16",
    ),
    (
        {"algorithm": "DFLASH", "draft_model_path": "d", "block_size": 4, "num_draft_tokens": 4},
        "dflash-b4",
        "--speculative-draft-model-path d --speculative-dflash-block-size 4",
    ),
    ({"algorithm": "DSPARK", "block_size": 7}, "dspark-b7", "--speculative-dspark-block-size 7"),
    (
        {"algorithm": "UNO", "uno_lora_path": "/l/uno", "num_draft_tokens": 4},
        "uno-d4",
        "--uno-lora-path /l/uno --speculative-num-draft-tokens 4",
    ),
    (
        {
            "algorithm": "UNO",
            "uno_lora_path": "/l/uno",
            "num_steps": 3,
            "topk": 2,
            "num_draft_tokens": 4,
        },
        "uno-s3-k2-d4",
        "--uno-lora-path /l/uno --speculative-num-draft-tokens 4 --speculative-num-steps 3 "
        "--speculative-eagle-topk 2",
    ),
    (
        {
            "algorithm": "FROZEN_KV_MTP",
            "draft_model_path": "g/mtp",
            "num_steps": 3,
            "topk": 1,
        },
        "frozen-kv-mtp-s3-k1-d4",
        "--speculative-draft-model-path g/mtp --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
    ),
    (
        {"algorithm": "NEXTN", "num_steps": 2, "topk": 1},
        "nextn-s2-k1-d3",
        "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3",
    ),
    (
        {"algorithm": "STANDALONE", "draft_model_path": "small", "num_steps": 3, "topk": 1},
        "standalone-s3-k1-d4",
        "--speculative-draft-model-path small --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
    ),
]


@pytest.mark.parametrize(("fields", "name", "flags"), ACCEPTED, ids=[a[1] for a in ACCEPTED])
def test_every_algorithm_is_accepted_named_and_launched_with_its_flags(fields, name, flags):
    variant = Variant(**fields)
    assert variant.label.startswith(name)
    line = build_launch_command(SERVER, variant).shell()
    assert f"--speculative-algorithm {fields['algorithm']} {flags}" in line
    assert shlex.split(line)  # every value quoted: the line splits back into its argv


def test_the_ngram_corpus_part_of_a_name_is_a_hash_of_its_path():
    def corpus(path):
        ngram = {"external_corpus_path": path, "external_sam_budget": 2}
        return Variant(algorithm="NGRAM", ngram=ngram).label

    assert corpus("a.jsonl") == corpus("a.jsonl") != corpus("b.jsonl")
    assert corpus("a.jsonl").startswith("ngram-w10-d12-corpus")
    assert corpus("a.jsonl").endswith("-sam2")


def test_ngram_with_sglang_defaults_written_out_is_the_same_variant():
    assert Variant(algorithm="NGRAM") == Variant(algorithm="NGRAM", ngram={})
    assert Variant(algorithm="NGRAM").resolved_topk == 10  # sglang: topk = max BFS breadth
    assert Variant(algorithm="NGRAM").resolved_num_steps == 1  # 12 // 10


def test_block_algorithms_resolve_what_sglang_runs():
    dflash = Variant(algorithm="DFLASH", draft_model_path="d", block_size=8)
    dspark = Variant(algorithm="DSPARK", block_size=7)
    assert (dflash.resolved_num_steps, dflash.resolved_topk) == (1, 1)
    assert dflash.resolved_num_draft_tokens == 8  # the block is the verify window
    assert dspark.resolved_num_draft_tokens == 8  # gamma + 1


UNO_TREE = {"algorithm": "UNO", "uno_lora_path": "l", "topk": 2}
REFUSED = [
    # NGRAM: silently overridden or ignored values, and _handle_ngram's corpus rules
    ({"algorithm": "NGRAM", "topk": 4}, "set ngram.max_bfs_breadth instead of topk"),
    ({"algorithm": "NGRAM", "num_steps": 3}, "sglang derives speculative_num_steps"),
    ({"algorithm": "NGRAM", "draft_model_path": "d"}, "sglang ignores draft_model_path"),
    (
        {"algorithm": "NGRAM", "ngram": {"external_corpus_path": "c.jsonl"}},
        "--speculative-ngram-external-sam-budget must be positive",
    ),
    (
        {
            "algorithm": "NGRAM",
            "ngram": {
                "external_corpus_path": "c.jsonl",
                "external_sam_budget": 2,
                "external_corpus_max_tokens": 0,
            },
        },
        "--speculative-ngram-external-corpus-max-tokens must be positive",
    ),
    (
        {
            "algorithm": "NGRAM",
            "num_draft_tokens": 4,
            "ngram": {"external_corpus_path": "c.jsonl", "external_sam_budget": 4},
        },
        "less than or equal to speculative_num_draft_tokens - 1 (3)",
    ),
    ({"algorithm": "NGRAM", "ngram": {"external_sam_budget": 2}}, "set ngram.external_corpus"),
    (
        {"algorithm": "NGRAM", "ngram": {"min_bfs_breadth": 5, "max_bfs_breadth": 4}},
        "min_bfs_breadth=5 exceeds max_bfs_breadth=4",
    ),
    # DFLASH: required draft, forced steps/topk, block size vs draft tokens
    ({"algorithm": "DFLASH", "block_size": 16}, "requires setting --speculative-draft-model"),
    (
        {"algorithm": "DFLASH", "draft_model_path": "d", "block_size": 16, "num_steps": 3},
        "DFLASH only supports speculative_num_steps == 1",
    ),
    (
        {"algorithm": "DFLASH", "draft_model_path": "d", "block_size": 16, "topk": 4},
        "DFLASH only supports speculative_eagle_topk == 1",
    ),
    ({"algorithm": "DFLASH", "draft_model_path": "d"}, "DFLASH needs block_size"),
    (
        {"algorithm": "DFLASH", "draft_model_path": "d", "block_size": 8, "num_draft_tokens": 4},
        "For DFLASH they must match",
    ),
    # DSPARK
    ({"algorithm": "DSPARK"}, "DSPARK needs block_size"),
    (
        {"algorithm": "DSPARK", "block_size": 7, "num_draft_tokens": 7},
        "must equal gamma + 1 (= 8 for gamma=7)",
    ),
    ({"algorithm": "DSPARK", "block_size": 7, "num_steps": 2}, "DSPARK only supports"),
    # UNO: _handle_uno
    (
        {"algorithm": "UNO", "uno_lora_path": "l", "num_draft_tokens": 4, "draft_model_path": "d"},
        "UNO reuses the target model",
    ),
    ({"algorithm": "UNO", "num_draft_tokens": 4}, "UNO requires --uno-lora-path"),
    ({"algorithm": "UNO", "uno_lora_path": "l"}, "UNO requires --speculative-num-draft-tokens"),
    (
        {"algorithm": "UNO", "uno_lora_path": "l", "num_draft_tokens": 4, "num_steps": 3},
        "UNO only supports speculative_num_steps == 1",
    ),
    (
        {"algorithm": "UNO", "uno_lora_path": "l", "num_draft_tokens": 4, "topk": 2},
        "UNO tree mode requires --speculative-num-steps",
    ),
    (
        {
            "algorithm": "UNO",
            "uno_lora_path": "l",
            "num_steps": 4,
            "topk": 2,
            "num_draft_tokens": 3,
        },
        "UNO tree mode requires Q >= F; got Q=3, F=5",
    ),
    (
        {
            "algorithm": "UNO",
            "uno_lora_path": "l",
            "num_steps": 2,
            "topk": 2,
            "num_draft_tokens": 5,
        },
        "cannot represent the requested Q in EAGLE's parent-list ABI",
    ),
    # fields of one algorithm on another, and adaptive (adaptive_unsupported_reason)
    (
        {
            "algorithm": "EAGLE3",
            "draft_model_path": "d",
            "num_steps": 2,
            "topk": 1,
            "block_size": 4,
        },
        "algorithm EAGLE3 ignores it",
    ),
    ({"algorithm": "DSPARK", "block_size": 7, "ngram": {}}, "ngram settings are for algorithm"),
    ({"algorithm": "NGRAM", "spec_v2": True}, "spec_v2 selects the EAGLE worker"),
    ({"algorithm": "NGRAM", "adaptive": True}, "sglang runs adaptive speculation with EAGLE"),
    (
        {"algorithm": "DFLASH", "draft_model_path": "d", "block_size": 4, "adaptive": True},
        "logs 'speculative_adaptive disabled'",
    ),
    ({"algorithm": "FROZEN_KV_MTP", "num_steps": 2, "topk": 1}, "needs draft_model_path"),
    ({"block_size": 4}, "set without an algorithm"),
]


@pytest.mark.parametrize(("fields", "reason"), REFUSED, ids=[r[1][:40] for r in REFUSED])
def test_what_sglang_refuses_or_overrides_is_refused_with_its_reason(fields, reason):
    with pytest.raises(ValueError) as err:
        Variant(**fields)
    assert reason in str(err.value)


@pytest.mark.parametrize(
    "flag", ["--speculative-ngram-capacity=5", "--speculative-dflash-block-size", "--uno-lora-path"]
)
def test_the_algorithms_flags_cannot_be_passed_around_their_fields(flag):
    with pytest.raises(ValueError, match="set by specsweep"):
        Variant(algorithm="NGRAM", extra_args=[flag])


UNO = {"algorithm": "UNO", "uno_lora_path": "l", "num_draft_tokens": 4}


@pytest.mark.parametrize(
    ("variant", "server", "reason"),
    [
        (UNO, {"tp": 2}, "UNO requires TP=PP=1"),
        ({"algorithm": "NGRAM"}, {"extra_args": ["--enable-dp-attention"]},
         "Currently ngram speculative decoding does not support dp attention."),
        ({"algorithm": "STANDALONE", "draft_model_path": "d", "num_steps": 2, "topk": 1},
         {"extra_args": ["--enable-dp-attention"]}, "standalone speculative decoding does not"),
        ({"algorithm": "DFLASH", "draft_model_path": "d", "block_size": 8},
         {"extra_args": ["--pp-size", "2"]}, "DFLASH speculative decoding only supports pp_size"),
        ({**UNO, "extra_args": ["--pp=2"]}, {}, "UNO requires TP=PP=1"),
    ],
)  # fmt: skip
def test_rules_that_depend_on_the_server_are_checked_across_the_config(
    tmp_path, variant, server, reason
):
    data = sim_config_data(tmp_path, 1, variants=[{}, variant])
    data["server"].update(server)
    with pytest.raises(ConfigError) as err:
        sweep_variants(parse_config(data))
    assert reason in str(err.value)


def test_the_adaptive_search_refuses_algorithms_its_model_does_not_describe(tmp_path):
    data = sim_config_data(tmp_path, 1, variants=[{}, {"algorithm": "NGRAM"}])
    data["search"] = "adaptive"
    with pytest.raises(ConfigError, match="run NGRAM, DFLASH, DSPARK and UNO with search: grid"):
        sweep_variants(parse_config(data))


def test_new_algorithms_are_gated_at_sglang_0_5_23():
    ngram = Variant(algorithm="NGRAM")
    dflash = Variant(algorithm="DFLASH", draft_model_path="d", block_size=4)
    check_version([ngram, dflash], "0.5.23", "local")
    with pytest.raises(UnsupportedByVersion) as err:
        check_version([ngram, dflash], "0.5.11", "local")
    assert "ngram-w10-d12 needs --speculative-algorithm NGRAM" in str(err.value)
    assert "dflash-b4 needs --speculative-algorithm DFLASH, which sglang has from 0.5.23" in str(
        err.value
    )
    eagle = Variant(algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1)
    check_version([eagle], "0.5.9", "local")  # the EAGLE family is not gated


def test_plan_accepts_every_algorithm_and_shows_its_command(tmp_path):
    variants = [{}] + [fields for fields, _, _ in ACCEPTED]
    path = tmp_path / "algos.yaml"
    path.write_text(yaml.safe_dump(sim_config_data(tmp_path, 1, variants=variants)))
    result = CliRunner().invoke(app, ["plan", "-c", str(path)], terminal_width=400)
    assert result.exit_code == 0, result.output
    for _, name, _ in ACCEPTED:
        assert name in result.output
    assert "--speculative-dflash-block-size 16" in result.output
    assert "needs --speculative-algorithm NGRAM (sglang >= 0.5.23)" in result.output


def test_plan_refuses_an_overridden_value_with_sglangs_reason(tmp_path):
    path = tmp_path / "bad.yaml"
    dflash = {"algorithm": "DFLASH", "draft_model_path": "d", "block_size": 8, "num_steps": 4}
    path.write_text(yaml.safe_dump(sim_config_data(tmp_path, 1, variants=[{}, dflash])))
    result = CliRunner().invoke(app, ["plan", "-c", str(path)], terminal_width=400)
    assert result.exit_code == 2
    assert "DFLASH only supports speculative_num_steps == 1" in result.output


# --- the algorithm sweep (issue 31, item 2) ---------------------------------------------

ALGORITHM_SWEEP = {
    "eagle3": {"draft_model_path": "sim/draft", "num_steps": [2, 3]},
    "ngram": {"num_draft_tokens": [8, 12]},
    "dflash": {"draft_model_path": "sim/dflash", "block_size": [8, 16]},
    "dspark": {},
    "uno": {"uno_lora_path": "sim/lora"},
}


def test_an_algorithm_sweep_is_the_baseline_then_each_algorithms_settings(tmp_path):
    config = parse_config(sim_config_data(tmp_path, 1, algorithm_sweep=ALGORITHM_SWEEP))
    labels = [v.label for v in sweep_variants(config, "algorithm-sweep")]
    assert labels == [
        "baseline", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4", "ngram-w10-d8", "ngram-w10-d12",
        "dflash-b8", "dflash-b16", "dspark-b7", "uno-d4",
    ]  # fmt: skip
    # the matrix sweep runs the section too, beside the step sweep's, each variant once
    matrix = [v.label for v in sweep_variants(config)]
    assert matrix.count("baseline") == 1 and "dflash-b16" in matrix


def test_an_algorithm_sweep_point_is_refused_with_sglangs_reason_naming_the_point(tmp_path):
    bad = {"dflash": {"block_size": [8]}}
    config = parse_config(sim_config_data(tmp_path, 1, algorithm_sweep=bad))
    with pytest.raises(ConfigError) as err:
        sweep_variants(config, "algorithm-sweep")
    assert "algorithm_sweep dflash block_size=8: DFLASH speculative decoding requires" in str(
        err.value
    )
    with pytest.raises(ValueError, match="enable at least one algorithm"):
        parse_config(sim_config_data(tmp_path, 1, algorithm_sweep={}))
    with pytest.raises(ConfigError, match="needs an algorithm_sweep section"):
        sweep_variants(parse_config(sim_config_data(tmp_path, 1)), "algorithm-sweep")


def test_plan_shows_the_algorithm_sweeps_exact_commands(tmp_path):
    path = tmp_path / "algos.yaml"
    data = sim_config_data(tmp_path, 1, algorithm_sweep=ALGORITHM_SWEEP)
    path.write_text(yaml.safe_dump(data))
    args = ["plan", "-c", str(path), "--sweep", "algorithm-sweep"]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 0, result.output
    assert result.output.count("specsweep.sim.launch_server") == 9
    assert "--speculative-algorithm DSPARK --speculative-dspark-block-size 7" in result.output
    assert "9 variants x 2 levels" in result.output


def test_the_algorithm_sweeps_form_gives_back_the_config(tmp_path):
    from specsweep.config.forms import AlgorithmSweepForm

    config = parse_config(sim_config_data(tmp_path, 1, algorithm_sweep=ALGORITHM_SWEEP))
    form = AlgorithmSweepForm.model_validate(config)
    values = form.model_dump(mode="json")
    assert set(values["algorithm_sweep"]) == {"eagle3", "ngram", "dflash", "more"}
    again = AlgorithmSweepForm.model_validate(values).sweep
    assert again.algorithm_sweep == config.algorithm_sweep
    assert "step_sweep" not in values
