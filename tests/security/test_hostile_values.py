"""Hostile values through the config and the command builder, nothing launched.

(a) Whatever a user configures reaches the argv and the environment verbatim, and the
    shell line printed in logs and results is a faithful, quoted rendering of it.
(b) What cannot be passed safely is refused at validation, with a message naming it.
"""

from __future__ import annotations

import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from specsweep.config import LocalTarget, check_run_id
from specsweep.config.command import MODULES, build_launch_command
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore, new_run_id
from specsweep.sim.server_args import build_parser
from specsweep.targets.local import LocalHost
from tests.security.hostile import (
    CANARY,
    hostile_env_values,
    hostile_extra_args,
    hostile_path,
    hostile_text,
)

PURE = settings(max_examples=100, deadline=None)


def _config(**server: Any) -> dict[str, Any]:
    return {
        "target": {"kind": "local", "name": "t", "workdir": "/tmp/unused-workdir"},
        "server": {"backend": "simulator", "model_path": "m", "port": 30000, **server},
        "load": {"concurrency": [1]},
    }


def _speculative(
    model_path: str, draft: str, server_extra: list[str], variant_extra: list[str], **server: Any
) -> tuple[Any, Any]:
    data = _config(model_path=model_path, max_running_requests=8, extra_args=server_extra, **server)
    data["variants"] = [
        {
            "algorithm": "EAGLE3",
            "draft_model_path": draft,
            "num_steps": 2,
            "topk": 1,
            "extra_args": variant_extra,
        }
    ]
    config = parse_config(data)
    return config, sweep_variants(config)[0]


@PURE
@given(
    model_path=hostile_path(),
    draft=hostile_path(),
    server_extra=hostile_extra_args(),
    variant_extra=hostile_extra_args(),
    server_env=hostile_env_values(),
    prefix=st.lists(hostile_text(), max_size=3),
    python=hostile_path(),
)
def test_argv_and_env_are_exactly_what_was_configured(
    model_path, draft, server_extra, variant_extra, server_env, prefix, python
):
    config, variant = _speculative(
        model_path, draft, server_extra, variant_extra,
        env=server_env, launch_prefix=prefix, python=python,
    )  # fmt: skip
    cmd = build_launch_command(config.server, variant)
    assert list(cmd.argv) == [
        *prefix, python, "-m", MODULES["simulator"],
        "--model-path", model_path, "--host", "127.0.0.1", "--port", "30000", "--tp-size", "1",
        "--max-running-requests", "8", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", draft, "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
        *server_extra, *variant_extra,
    ]  # fmt: skip
    assert dict(cmd.env) == server_env
    # The logged line parses back into exactly that argv (and env), whatever it holds.
    words = shlex.split(cmd.shell(redact=False))
    assignments = [f"{k}={v}" for k, v in sorted(server_env.items())]
    assert words == (["env", *assignments] if server_env else []) + list(cmd.argv)


@PURE
@given(env=hostile_env_values())
def test_secret_values_never_reach_the_logged_line(env):
    config, variant = _speculative("m", "d", [], [], env=env)
    line = build_launch_command(config.server, variant).shell()
    for name in ("HF_TOKEN", "MY_API_KEY"):
        if env.get(name):
            # Word by word: a short value such as "1" may equal another word (a topk),
            # and the same hostile string may be a non-secret variable's value too.
            words = shlex.split(line)
            assert f"{name}=***" in words and f"{name}={env[name]}" not in words


@pytest.fixture(scope="module")
def argv_printer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stands in for the python interpreter: prints the argv and env it was given."""
    path = tmp_path_factory.mktemp("printer") / "print_argv"
    path.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps([sys.argv[1:], {k: v for k, v in os.environ.items() "
        "if k.startswith(('HOSTILE_', 'HF_', 'MY_', 'X'))}]))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    model_path=hostile_path(),
    draft=hostile_path(),
    extra=hostile_extra_args(),
    env=hostile_env_values().filter(lambda e: "X" not in e),
)
def test_the_logged_shell_line_runs_exactly_that_argv_in_bash(
    argv_printer, model_path, draft, extra, env
):
    """Copy-pasted into bash, the line from `specsweep plan` / the results runs the same
    argv with the same environment, and nothing in it is executed by the shell."""
    import json

    config, variant = _speculative(model_path, draft, extra, [], env=env, python=str(argv_printer))
    cmd = build_launch_command(config.server, variant)
    out = subprocess.run(
        ["bash", "-c", cmd.shell(redact=False)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    argv, seen_env = json.loads(out.stdout)
    assert argv == list(cmd.argv[1:])
    assert seen_env == env
    assert not CANARY.exists()


# -- (b) refused with a clear message ------------------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@PURE
@given(name=st.text(max_size=12).filter(lambda s: not _ENV_NAME.fullmatch(s)))
@example(name="FOO\n")  # re.match(...$) lets a trailing newline through
@example(name="A=B")
@example(name="$(touch x)")
def test_env_names_that_are_not_names_are_refused(name):
    for where in ("server", "variant"):
        data = _config(env={name: "v"} if where == "server" else {})
        if where == "variant":
            data["variants"] = [{"env": {name: "v"}}]
        with pytest.raises(ConfigError) as info:
            parse_config(data)
        assert f"environment variable name {name!r} is not a valid name" in str(info.value)


_VARIANT = re.compile(r"[a-z0-9][a-z0-9._=-]{0,79}")


@PURE
@given(name=st.text(max_size=90).filter(lambda s: not _VARIANT.fullmatch(s)))
@example(name="baseline\n")
@example(name="../../etc")
@example(name="a/b")
@example(name="Baseline")
def test_variant_names_outside_the_charset_are_refused(name):
    data = _config()
    data["variants"] = [{"name": name}]
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert f"variant name {name!r}: use lowercase letters, digits and . _ = -" in str(info.value)


@PURE
@given(
    name=st.from_regex(_VARIANT, fullmatch=True),
    run_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,40}", fullmatch=True),
)
def test_accepted_names_keep_logs_and_results_inside_their_folders(name, run_id):
    parse_config({**_config(), "variants": [{"name": name}]})
    RunContext(run_id, "matrix_sweep", "s", "t")
    root = Path("/srv/specsweep")
    log = LocalHost.for_target(LocalTarget(workdir=root / "work")).log_path(run_id, name)
    assert log.parent == root / "work" / "logs" / run_id and log.name == f"{name}.log"
    level = ResultsStore(root / "results").level_path(run_id, name, 8, name)
    assert level.parent == root / "results" / "levels" / run_id


@PURE
@given(run_id=hostile_text())
@example(run_id="../../../tmp/x")
@example(run_id="run\n")
@example(run_id="-rf")
def test_run_ids_that_would_escape_their_folder_are_refused(run_id):
    # An ordinary id is not the case here (hypothesis rarely builds one from hostile pieces);
    # assume() lets Hypothesis report it if it filters too many.
    assume(not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,127}", run_id))
    with pytest.raises(ConfigError, match=r"run id .*: use letters, digits"):
        check_run_id(run_id)
    with pytest.raises(ConfigError, match="run id"):
        RunContext(run_id, "step_sweep", "s", "t")


def test_generated_run_ids_are_accepted():
    assert check_run_id(new_run_id()) and check_run_id("nightly-20261129T0300Z")


# Flags whose value specsweep owns, as sglang's parser resolves them (the simulator's
# parser is a copy of sglang's): exact spellings, aliases and unambiguous abbreviations.
_OWNED_DESTS = {
    "model_path", "host", "port", "tp_size", "max_running_requests", "served_model_name",
    "context_length",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_adaptive",
    "speculative_adaptive_config",
    # the algorithms' own settings (specsweep/config/algorithms.py sets them per variant)
    "speculative_dflash_block_size", "speculative_dspark_block_size", "uno_lora_path",
}  # fmt: skip
_PARSER = build_parser()
_ACTIONS = _PARSER._option_string_actions  # option string -> action
_OWNED_DESTS |= {a.dest for a in _ACTIONS.values() if a.dest.startswith("speculative_ngram_")}


def _resolves_to(flag: str) -> set[str]:
    """The dests argparse may give `flag` (several when it is ambiguous)."""
    if flag in _ACTIONS:
        return {_ACTIONS[flag].dest}
    return {a.dest for opt, a in _ACTIONS.items() if opt.startswith(flag)}


_OWNED_SPELLINGS = sorted(o for o, a in _ACTIONS.items() if a.dest in _OWNED_DESTS)


@PURE
@given(
    spelling=st.sampled_from(_OWNED_SPELLINGS),
    cut=st.integers(min_value=4, max_value=40),
    joined=st.booleans(),
    where=st.sampled_from(["server", "variant"]),
)
def test_flags_specsweep_owns_are_refused_in_extra_args(spelling, cut, joined, where):
    flag = spelling[: max(cut, 4)]
    dests = _resolves_to(flag)
    assume(dests and dests <= _OWNED_DESTS)  # not a flag of sglang's own (nor nothing)
    args = [f"{flag}=1"] if joined else [flag, "1"]
    data = _config(extra_args=args) if where == "server" else _config()
    if where == "variant":
        data["variants"] = [{"extra_args": args}]
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    message = str(info.value)
    assert flag in message
    assert "set by specsweep" in message or "which specsweep sets" in message


def test_flags_specsweep_does_not_own_are_passed_through():
    """No false positives: every other flag sglang knows stays usable in extra_args."""
    others = [o for o, a in _ACTIONS.items() if a.dest not in _OWNED_DESTS and o != "-h"]
    others = [o for o in others if o.startswith("--") and o != "--help"]
    refused = []
    for opt in others:
        try:
            parse_config(_config(extra_args=[opt]))
        except ConfigError:
            refused.append(opt)
    # The draft model's revision is refused with the draft model flags (one prefix rule).
    assert refused == ["--speculative-draft-model-revision"]


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"model_path": "-rf"}, "model_path '-rf' starts with '-': sglang would read it as a flag"),
        ({"model_path": "a\0b"}, "model_path contains a NUL byte"),
        ({"env": {"HF_TOKEN": "a\0b"}}, "environment variable HF_TOKEN: the value contains a NUL"),
        ({"extra_args": ["--revision=a\0b"]}, "contains a NUL byte"),
        ({"launch_prefix": ["numactl", "-N\0"]}, "contains a NUL byte"),
    ],
)
def test_values_no_process_could_receive_are_refused(server, message):
    with pytest.raises(ConfigError) as info:
        parse_config(_config(**server))
    assert message in str(info.value)


def test_a_draft_path_that_looks_like_a_flag_is_refused():
    data = _config(max_running_requests=8)
    data["variants"] = [
        {"algorithm": "EAGLE3", "draft_model_path": "--port", "num_steps": 1, "topk": 1}
    ]
    with pytest.raises(ConfigError, match="draft_model_path '--port' starts with '-'"):
        parse_config(data)
