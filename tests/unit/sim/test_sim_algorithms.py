"""The simulator knows every algorithm of sglang 0.5.23 (issue 31, item 3): it resolves
each one's flags as sglang does (its errors, overrides and warnings, the adaptive
fallback), and its performance model gives each its own cost structure."""

from __future__ import annotations

import pytest

from specsweep.sim.perf_model import (
    SpecConfig,
    draft_ms,
    expected_accept_length,
    spec_cycle_ms,
    steady_state_throughput,
    target_forward_ms,
)
from specsweep.sim.profiles import get_profile
from specsweep.sim.server_args import parse_args, resolve_server_args, spec_config_from_args

MRR = "Max running requests is reset to 48"
PROFILES = ("default", "llama-3.1-8b-eagle3-h200")


def resolve(*flags: str, version: str = "0.5.23"):
    ns = parse_args(["--model-path", "sim/llama", *flags], version)
    return resolve_server_args(ns, {}, version)


def test_ngram_follows_0_5_23s_handle_ngram():
    args, warnings = resolve("--speculative-algorithm", "NGRAM")
    assert args["speculative_eagle_topk"] == 10  # the max BFS breadth
    assert args["speculative_num_draft_tokens"] == 12
    assert args["speculative_num_steps"] == 1  # 12 // 10
    assert any(w.startswith(MRR) for w in warnings)
    assert any("set to 12 by default for ngram" in w for w in warnings)
    spec = spec_config_from_args(args)
    assert spec is not None and spec.overlap  # 0.5.23's ngram worker runs under overlap
    args, _ = resolve(
        "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8",
        "--speculative-ngram-max-bfs-breadth", "4",
    )  # fmt: skip
    assert (args["speculative_eagle_topk"], args["speculative_num_steps"]) == (4, 2)


def test_dflash_overrides_steps_and_topk_with_sglangs_warning():
    args, warnings = resolve(
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d",
        "--speculative-dflash-block-size", "8", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "4",
    )  # fmt: skip
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"]) == (1, 1)
    assert args["speculative_num_draft_tokens"] == 8
    assert (
        "DFLASH only supports speculative_num_steps == 1; overriding speculative_num_steps=3 "
        "to 1." in warnings
    )
    assert any("speculative_eagle_topk=4 to 1" in w for w in warnings)


def test_dspark_verifies_gamma_plus_one_and_defaults_gamma_to_7():
    args, _ = resolve("--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "3")
    assert args["speculative_num_draft_tokens"] == 4
    args, warnings = resolve("--speculative-algorithm", "DSPARK")
    assert args["speculative_num_draft_tokens"] == 8
    assert "DSpark gamma is not set; defaulting to 7." in warnings


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["NGRAM", "--speculative-ngram-external-corpus-path", "c.jsonl"],
         "--speculative-ngram-external-sam-budget must be positive"),
        (["DFLASH", "--speculative-dflash-block-size", "8"],
         "DFLASH speculative decoding requires setting --speculative-draft-model-path."),
        (["DFLASH", "--speculative-draft-model-path", "d", "--speculative-dflash-block-size", "8",
          "--speculative-num-draft-tokens", "4"], "For DFLASH they must match"),
        (["DSPARK", "--speculative-dspark-block-size", "7", "--speculative-num-draft-tokens", "7"],
         "DSpark speculative_num_draft_tokens must equal gamma + 1"),
        (["UNO", "--speculative-num-draft-tokens", "4"], "UNO requires --uno-lora-path."),
        (["UNO", "--uno-lora-path", "l", "--speculative-num-draft-tokens", "4", "--tp", "2"],
         "UNO requires TP=PP=1."),
        (["UNO", "--uno-lora-path", "l", "--speculative-num-draft-tokens", "4",
          "--attention-backend", "triton"], "UNO requires FA3"),
        (["FROZEN_KV_MTP"], "FROZEN_KV_MTP needs speculative_num_steps"),
    ],
)  # fmt: skip
def test_what_sglang_refuses_the_simulator_refuses(flags, error):
    with pytest.raises(ValueError) as err:
        resolve("--speculative-algorithm", *flags)
    assert error in str(err.value)


@pytest.mark.parametrize("algorithm", ["NGRAM", "DFLASH", "DSPARK", "FROZEN_KV_MTP"])
def test_adaptive_falls_back_to_static_for_every_algorithm_but_eagle(algorithm):
    flags = ["--speculative-algorithm", algorithm, "--speculative-adaptive"]
    if algorithm == "DFLASH":
        flags += ["--speculative-draft-model-path", "d"]
    if algorithm == "FROZEN_KV_MTP":
        flags += ["--speculative-num-steps", "2", "--speculative-eagle-topk", "1"]
        flags += ["--speculative-num-draft-tokens", "3"]
    args, warnings = resolve(*flags)
    assert not args["speculative_adaptive"]
    assert (
        f"speculative_adaptive disabled: speculative_algorithm={algorithm} (only EAGLE/EAGLE3 "
        "are supported). Falling back to static speculative params." in warnings
    )


def test_the_new_algorithms_and_flags_do_not_exist_before_0_5_23():
    with pytest.raises(SystemExit):
        parse_args(["--model-path", "m", "--speculative-algorithm", "DFLASH"], "0.5.11")
    with pytest.raises(SystemExit):
        parse_args(["--model-path", "m", "--speculative-ngram-capacity", "5"], "0.5.11")
    parse_args(["--model-path", "m", "--speculative-algorithm", "NGRAM"], "0.5.11")


@pytest.mark.parametrize("profile", PROFILES)
def test_ngram_costs_almost_no_gpu_and_accepts_with_the_texts_repetition(profile):
    p = get_profile(profile)
    ngram = SpecConfig("NGRAM", 11, 10, 12)
    assert draft_ms(p, 8, ngram) < 0.1 * target_forward_ms(p, 8, 8)  # the CPU's trie lookup
    lengths = {c: expected_accept_length(p, ngram, c) for c in ("random", "chat", "code")}
    lengths.update({c: expected_accept_length(p, ngram, c) for c in ("summarisation",)})
    assert lengths["random"] < 1.1  # random ids repeat nothing
    assert lengths["chat"] < lengths["summarisation"] and lengths["chat"] < lengths["code"]
    assert lengths["code"] > 2.0


@pytest.mark.parametrize("profile", PROFILES)
def test_block_drafting_pays_per_block_and_accepts_less_per_position(profile):
    p = get_profile(profile)
    small, large = SpecConfig("DFLASH", 1, 1, 8), SpecConfig("DFLASH", 1, 1, 16)
    assert draft_ms(p, 4, large) > draft_ms(p, 4, small)  # the drafter's forward covers the block
    assert spec_cycle_ms(p, 4, large) > spec_cycle_ms(p, 4, small)
    # a larger block adds positions that are accepted less and less
    gain = expected_accept_length(p, large, "chat") - expected_accept_length(p, small, "chat")
    assert 0 < gain < 8 * 0.5
    # DSPARK's gamma 7 verifies the same window as a DFLASH block of 8
    assert spec_cycle_ms(p, 4, SpecConfig("DSPARK", 1, 1, 8)) == spec_cycle_ms(p, 4, small)
    # a block costs dearly at saturation: it loses to the baseline there
    assert steady_state_throughput(p, 64, large, 64) < steady_state_throughput(p, 64, None, 64)


@pytest.mark.parametrize("profile", PROFILES)
def test_mtp_and_uno_draft_costs_are_tied_to_the_target(profile):
    p = get_profile(profile)
    mtp = SpecConfig("FROZEN_KV_MTP", 3, 1, 4)
    heavier = p.__class__(**{**p.__dict__, "t0_ms": p.t0_ms * 2})
    assert draft_ms(heavier, 4, mtp) > draft_ms(p, 4, mtp)  # a bigger target, a bigger head
    eagle = SpecConfig("EAGLE3", 3, 1, 4)
    assert draft_ms(heavier, 4, eagle) == draft_ms(p, 4, eagle)
    uno = SpecConfig("UNO", 1, 1, 4)
    assert draft_ms(p, 4, uno) >= target_forward_ms(p, 4, 16)  # the target drafts the block


def test_eagle_numbers_are_unchanged():
    # the profiles' EAGLE/EAGLE3 figures are what the ground-truth tests rely on
    p = get_profile("llama-3.1-8b-eagle3-h200")
    spec = SpecConfig("EAGLE3", 3, 1, 4)
    assert expected_accept_length(p, spec) == pytest.approx(3.01248, abs=1e-4)  # as before issue 31


def test_a_profile_file_sets_the_algorithms_constants(tmp_path):
    from specsweep.sim.profiles import load_file

    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\nextends: default\n"
        "draft: {block_factor: 3, mtp_layer_share: 0.05, ngram_ms_per_seq: 0.01}\n"
        "acceptance: {ngram_match_rate: {chat: 0.5}, ngram_decay: 0.8, block_p: 0.7}\n"
    )
    p = load_file(path)
    assert (p.block_draft_factor, p.mtp_layer_share, p.ngram_ms_per_req) == (3, 0.05, 0.01)
    assert (p.ngram_decay, p.block_accept_p) == (0.8, 0.7)
    rates = dict(p.ngram_match_rate)
    assert rates["chat"] == 0.5 and rates["code"] == 0.6  # merged over the parent's
