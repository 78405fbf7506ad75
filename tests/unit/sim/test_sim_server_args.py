"""The simulator resolves sglang's flags exactly as sglang 0.5.9 does."""

from __future__ import annotations

import pytest

from specsweep.sim.server_args import (
    DRAFT_TOKENS_WARNING,
    MAX_RUNNING_RESET_WARNING,
    parse_args,
    resolve_server_args,
    spec_config_from_args,
)

SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft"]


def resolve(*flags: str, env: dict[str, str] | None = None):
    ns = parse_args(["--model-path", "sim/llama", *flags])
    return resolve_server_args(ns, env or {})


def test_defaults_match_sglang():
    args, warnings = resolve()
    assert args["host"] == "127.0.0.1" and args["port"] == 30000 and args["tp_size"] == 1
    assert args["stream_interval"] == 1 and args["max_running_requests"] is None
    assert args["served_model_name"] == "sim/llama" and args["speculative_algorithm"] is None
    assert spec_config_from_args(args) is None and warnings == []


def test_aliases():
    args, _ = resolve("--tp", "2", "--dp", "2")
    assert args["tp_size"] == 2 and args["dp_size"] == 2
    ns = parse_args(["--model", "m", "--tp-size", "4"])
    assert ns.model_path == "m" and ns.tp_size == 4


@pytest.mark.parametrize(
    "argv",
    [["--model-path", "m", "--no-such-flag"], ["--port", "1"], ["--model-path", "m", "--tp", "x"]],
)
def test_bad_command_lines_exit_2_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_unknown_algorithm_is_rejected_by_argparse():
    with pytest.raises(SystemExit):
        parse_args(["--model-path", "m", "--speculative-algorithm", "MEDUSA"])


def test_speculation_resets_max_running_requests_to_48():
    args, warnings = resolve(*SPEC, "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                             "--speculative-num-draft-tokens", "3")  # fmt: skip
    assert args["max_running_requests"] == 48
    assert MAX_RUNNING_RESET_WARNING in warnings


def test_explicit_max_running_requests_is_kept():
    args, warnings = resolve(*SPEC, "--max-running-requests", "128")
    assert args["max_running_requests"] == 128
    assert MAX_RUNNING_RESET_WARNING not in warnings


def test_topk_one_forces_draft_tokens_with_a_warning():
    args, warnings = resolve(*SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk",
                             "1", "--speculative-num-draft-tokens", "8")  # fmt: skip
    assert args["speculative_num_draft_tokens"] == 4
    assert DRAFT_TOKENS_WARNING in warnings
    args, warnings = resolve(*SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk",
                             "1", "--speculative-num-draft-tokens", "4")  # fmt: skip
    assert DRAFT_TOKENS_WARNING not in warnings


def test_all_unset_picks_sglang_auto_choice():
    args, _ = resolve(*SPEC)
    triple = (
        args["speculative_num_steps"],
        args["speculative_eagle_topk"],
        args["speculative_num_draft_tokens"],
    )
    assert triple == (3, 1, 4)
    spec = spec_config_from_args(args)
    assert spec is not None and (spec.num_steps, spec.topk, spec.num_draft_tokens) == triple


@pytest.mark.parametrize(
    "flags",
    [["--speculative-eagle-topk", "4"], ["--speculative-num-draft-tokens", "8"]],
)
def test_steps_unset_with_topk_or_draft_tokens_is_a_bare_assertion(flags):
    with pytest.raises(AssertionError) as exc:
        resolve(*SPEC, *flags)
    assert str(exc.value) == ""


@pytest.mark.parametrize("value", ["True", "true", "1", "TRUE"])
def test_spec_v2_with_topk_above_one_fails(value):
    flags = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
             "--speculative-num-draft-tokens", "8"]  # fmt: skip
    with pytest.raises(ValueError) as info:
        resolve(*SPEC, *flags, env={"SGLANG_ENABLE_SPEC_V2": value})
    # sglang 0.5.9's message, word for word
    assert str(info.value) == "Spec v2 currently only supports topk = 1 for speculative decoding."
    args, _ = resolve(*SPEC, *flags, env={"SGLANG_ENABLE_SPEC_V2": "false"})
    assert args["disable_overlap_schedule"] is True  # v1: no overlap


def test_spec_v2_with_topk_one_turns_overlap_on():
    args, _ = resolve(*SPEC, "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                      env={"SGLANG_ENABLE_SPEC_V2": "True"})  # fmt: skip
    assert args["disable_overlap_schedule"] is False
    spec = spec_config_from_args(args)
    assert spec is not None and spec.overlap


def test_nextn_is_eagle_and_ngram_is_resolved():
    args, _ = resolve("--speculative-algorithm", "NEXTN")
    assert args["speculative_algorithm"] == "EAGLE"
    args, _ = resolve("--speculative-algorithm", "NGRAM")
    spec = spec_config_from_args(args)
    assert spec is not None and spec.algorithm == "NGRAM"
    assert args["max_running_requests"] == 48


def test_invalid_stream_interval():
    with pytest.raises(ValueError):
        resolve("--stream-interval", "0")
