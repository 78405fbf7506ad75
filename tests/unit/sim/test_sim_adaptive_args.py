"""``--speculative-adaptive`` on the command line: sglang 0.5.23's speculative_hook rules
(``_maybe_disable_adaptive``, ``_init_adaptive_speculative_params``) and the releases
that lack the flag or refuse it under the overlap scheduler."""

from __future__ import annotations

import json

import pytest

from specsweep.sim import launch_server
from specsweep.sim.adaptive import FALLBACK_WARNING
from specsweep.sim.perf_model import SpecConfig
from specsweep.sim.server_args import (
    MAX_RUNNING_RESET_WARNING,
    parse_args,
    resolve_server_args,
    spec_config_from_args,
)

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft"]
ADAPTIVE = [*EAGLE3, "--speculative-adaptive"]
V2 = {"SGLANG_ENABLE_SPEC_V2": "True"}


def resolve(*flags: str, env: dict[str, str] | None = None, version: str = "0.5.23"):
    ns = parse_args(["--model-path", "sim/llama", *flags], version)
    return resolve_server_args(ns, env or {}, version)


def config(tmp_path, data) -> str:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(data))
    return str(path)


def fallback(reason: str) -> str:
    return f"speculative_adaptive disabled: {reason}. Falling back to static speculative params."


def test_default_config_starts_at_the_middle_of_the_union():
    args, warnings = resolve(*ADAPTIVE)
    assert args["speculative_adaptive"] is True
    # union of 1:[1,3,5,7], 8:[0,1,3], 32:[0,1], 64:[0] is [0,1,3,5,7]: the middle is 3
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"]) == (3, 1)
    assert args["speculative_num_draft_tokens"] == 4
    assert warnings[0] == MAX_RUNNING_RESET_WARNING  # the usual eagle rules follow
    assert not any("adaptive" in w for w in warnings)
    assert spec_config_from_args(args) == SpecConfig("EAGLE3", 3, 1, 4)


def test_custom_tiers_and_nextn(tmp_path):
    path = config(tmp_path, {"1": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}})
    args, _ = resolve("--speculative-algorithm", "NEXTN", "--speculative-adaptive",
                      "--speculative-adaptive-config", path)  # fmt: skip
    assert args["speculative_algorithm"] == "EAGLE" and args["speculative_adaptive"] is True
    assert args["speculative_num_steps"] == 1 and args["speculative_num_draft_tokens"] == 2
    assert args["speculative_adaptive_config"] == path


def test_steps_zero_is_allowed_with_adaptive_only(tmp_path):
    path = config(tmp_path, {"1": {"candidate_steps": [0]}})
    args, _ = resolve(*ADAPTIVE, "--speculative-adaptive-config", path,
                      "--speculative-num-steps", "0")  # fmt: skip
    assert (args["speculative_num_steps"], args["speculative_num_draft_tokens"]) == (0, 1)
    spec = spec_config_from_args(args)
    assert spec is not None and spec.is_zero_step
    with pytest.raises(ValueError, match="must be >= 1"):  # static speculation keeps its rule
        resolve(*EAGLE3, "--speculative-num-steps", "0", "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "1")  # fmt: skip


def test_draft_tokens_follow_the_steps_whatever_was_asked():
    asked = ["--speculative-num-steps", "5", "--speculative-eagle-topk", "1"]
    args, warnings = resolve(*ADAPTIVE, *asked, "--speculative-num-draft-tokens", "9")
    assert args["speculative_num_draft_tokens"] == 6
    assert not any("adjusted" in w for w in warnings)  # set before the topk-1 rule looks


def test_steps_outside_the_candidates_is_sglangs_error(tmp_path):
    path = config(tmp_path, {"1": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}})
    with pytest.raises(ValueError) as exc:
        resolve(*ADAPTIVE, "--speculative-adaptive-config", path, "--speculative-num-steps", "3")
    assert str(exc.value) == (
        "--speculative-num-steps=3 is not in the adaptive config candidate_steps [0, 1]. "
        "Pass one of those values."
    )


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--speculative-algorithm", "NGRAM"],
         "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)"),
        (["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "d"],
         "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)"),
        ([], "speculative_algorithm=None (only EAGLE/EAGLE3 are supported)"),
        ([*EAGLE3, "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
          "--speculative-num-draft-tokens", "6"],
         "speculative_eagle_topk=2 (only topk=1 is supported)"),
        ([*EAGLE3, "--enable-dp-attention", "--dp", "2"],
         "attention DP is not supported (adaptive tier decisions are not synchronized "
         "across DP ranks)"),
    ],
)  # fmt: skip
def test_unsupported_falls_back_to_static_params(flags, reason):
    args, warnings = resolve(*flags, "--speculative-adaptive")
    assert warnings[0] == fallback(reason) == FALLBACK_WARNING.format(reason=reason)
    assert args["speculative_adaptive"] is False


def test_topk_two_falls_back_and_keeps_its_static_tree():
    args, _ = resolve(*ADAPTIVE, "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
                      "--speculative-num-draft-tokens", "6")  # fmt: skip
    assert spec_config_from_args(args) == SpecConfig("EAGLE3", 3, 2, 6)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10", "0.4.9.post1"])
def test_releases_before_0_5_11_have_no_adaptive_flags(version, capsys):
    for flag in (["--speculative-adaptive"], ["--speculative-adaptive-config", "a.json"]):
        with pytest.raises(SystemExit) as exc:
            parse_args(["--model-path", "m", *EAGLE3, *flag], version)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "usage:" in err and f"unrecognized arguments: {flag[0]}" in err
    args, _ = resolve(*EAGLE3, version=version)
    assert "speculative_adaptive" not in args


@pytest.mark.parametrize("version", ["0.5.11", "0.5.11rc1", "0.5.22"])
def test_0_5_11_to_0_5_22_refuse_the_overlap_scheduler(version):
    args, warnings = resolve(*ADAPTIVE, env=V2, version=version)
    assert warnings[0] == fallback("the overlap scheduler (spec v2) is not supported")
    assert args["speculative_adaptive"] is False and not args["disable_overlap_schedule"]
    assert args["speculative_num_steps"] == 3 and args["speculative_num_draft_tokens"] == 4
    plain, warnings = resolve(*ADAPTIVE, version=version)  # v1 worker: supported
    assert plain["speculative_adaptive"] is True
    assert not any(w.startswith("speculative_adaptive disabled") for w in warnings)


def test_0_5_23_runs_adaptive_under_the_overlap_scheduler():
    args, warnings = resolve(*ADAPTIVE, env=V2)
    assert args["speculative_adaptive"] is True and not args["disable_overlap_schedule"]
    assert not any("speculative_adaptive disabled" in w for w in warnings)
    assert spec_config_from_args(args) == SpecConfig("EAGLE3", 3, 1, 4, overlap=True)


def test_version_comes_from_the_environment_when_not_given():
    ns = parse_args(["--model-path", "m", *ADAPTIVE])
    args, warnings = resolve_server_args(ns, {**V2, "SPECSWEEP_SIM_SGLANG_VERSION": "0.5.12"})
    assert args["speculative_adaptive"] is False and "spec v2" in warnings[0]


def test_cuda_graph_max_bs_follows_a_small_explicit_max_running_requests():
    assert resolve("--max-running-requests", "100")[0]["cuda_graph_max_bs"] == 100
    assert resolve("--max-running-requests", "512")[0]["cuda_graph_max_bs"] == 256
    assert resolve(*EAGLE3)[0]["cuda_graph_max_bs"] == 256  # the 48 reset comes later
    kept = resolve("--max-running-requests", "100", "--cuda-graph-max-bs", "160")[0]
    assert kept["cuda_graph_max_bs"] == 160


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ("{broken", "json.decoder.JSONDecodeError"),
        ({"1": {"candidate_steps": []}}, "ValueError: BS 1: candidate_steps must be a list"),
        ({"x": {"candidate_steps": [1]}}, "ValueError: speculative_adaptive_config must"),
        ({"1": {"candidate_steps": [1]}}, "ValueError: --speculative-num-steps=3 is not in"),
        (None, "FileNotFoundError"),
    ],
)
def test_launcher_exits_1_with_the_traceback(tmp_path, capsys, monkeypatch, data, error):
    path = tmp_path / "adaptive.json"
    if isinstance(data, str):
        path.write_text(data)
    elif data is not None:
        path.write_text(json.dumps(data))
    monkeypatch.delenv("SPECSWEEP_SIM_SGLANG_VERSION", raising=False)
    argv = ["--model-path", "m", *ADAPTIVE, "--speculative-adaptive-config", str(path)]
    if data == {"1": {"candidate_steps": [1]}}:
        argv += ["--speculative-num-steps", "3"]
    assert launch_server.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and error in err


def test_launcher_refuses_a_bad_version_knob(capsys, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_SIM_SGLANG_VERSION", "latest")
    assert launch_server.main(["--model-path", "m"]) == 1
    assert "SPECSWEEP_SIM_SGLANG_VERSION must be an sglang version" in capsys.readouterr().err


def test_launcher_parses_as_the_simulated_release(capsys, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_SIM_SGLANG_VERSION", "0.5.9")
    with pytest.raises(SystemExit) as exc:
        launch_server.main(["--model-path", "m", *ADAPTIVE])
    assert exc.value.code == 2
    assert "unrecognized arguments: --speculative-adaptive" in capsys.readouterr().err
