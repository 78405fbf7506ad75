"""Which env variables and flags hold a secret: the rule in specsweep/config/redact.py,
both ways (every secret hidden, no knob that merely mentions a secret word hidden)."""

from __future__ import annotations

import json
import shlex

import pytest

from specsweep.config import ServerSpec, Variant
from specsweep.config.command import build_launch_command
from specsweep.config.file import parse_config
from specsweep.config.redact import KNOWN_SECRETS, is_secret_name, redact_args, redact_env
from specsweep.results.runs import redacted_config_json

SECRETS = [
    # the last word is a secret word
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACEHUB_API_TOKEN",
    "GITHUB_TOKEN",
    "AWS_SESSION_TOKEN",
    "OPENAI_API_KEY",
    "MY_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "SSH_PRIVATE_KEY",
    "WANDB_API_KEY",
    "MY_SECRET",
    "CLIENT_SECRETS",
    "SECRET_TOKEN",
    "DB_PASSWORD",
    "REDIS_PASSWD",
    "SMTP_PASS",
    "SERVICE_APIKEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "ADMIN_KEYS",
    # case and separators
    "hf_token",
    "my-api-key",
    "service.password",
    # the word alone
    "TOKEN",
    "PASSWORD",
    # known names that end in another word
    "AWS_ACCESS_KEY_ID",
    "PGPASSWORD",
    "MYSQL_PWD",
    "PREFECT_API_AUTH_STRING",
]
KNOBS = [
    "X_TOKEN_FACTOR",
    "SGLANG_MAX_TOKENS",
    "TOKENIZERS_PARALLELISM",
    "HF_TOKEN_PATH",  # where a token is, not the token
    "KEY_CACHE_DTYPE",
    "SGLANG_ENABLE_SPEC_V2",
    "CUDA_VISIBLE_DEVICES",
    "PASSTHROUGH",
    "MYTOKEN",  # one word that is not a secret word: shown (a secret: reference hides it)
    "PWD",
    "PATH",
]


@pytest.mark.parametrize("name", SECRETS)
def test_a_name_ending_in_a_secret_word_or_known_is_secret(name):
    assert is_secret_name(name)
    assert redact_env({name: "v4lue", "PLAIN": "1"}) == {name: "***", "PLAIN": "1"}


@pytest.mark.parametrize("name", KNOBS)
def test_a_knob_that_only_mentions_a_secret_word_is_shown(name):
    assert not is_secret_name(name)
    assert redact_env({name: "0.5"}) == {name: "0.5"}


def test_every_known_secret_is_secret_and_needs_its_entry():
    """KNOWN_SECRETS holds only what the word rule misses."""
    for name in KNOWN_SECRETS:
        assert is_secret_name(name)
        assert not is_secret_name(f"{name}_SUFFIX")  # the whole name, not a prefix


def test_flags_follow_the_same_rule():
    argv = ["--api-key", "sk-1", "--hf-token=hf_2", "--db-password", "p", "--ssl-key", "k"]
    argv += ["--max-total-tokens", "9", "--speculative-num-draft-tokens", "4"]
    argv += ["--tokenizer-path", "tok/p", "--speculative-token-map", "m.pt"]
    argv += ["--x-token-factor", "2"]
    assert redact_args(argv) == [
        "--api-key", "***", "--hf-token=***", "--db-password", "***", "--ssl-key", "***",
        "--max-total-tokens", "9", "--speculative-num-draft-tokens", "4",
        "--tokenizer-path", "tok/p", "--speculative-token-map", "m.pt",
        "--x-token-factor", "2",
    ]  # fmt: skip


def test_the_launch_line_shows_knobs_and_hides_secrets():
    env = {"X_TOKEN_FACTOR": "0.5", "SGLANG_MAX_TOKENS": "4096", "HF_TOKEN": "hf_abc"}
    env |= {"TOKENIZERS_PARALLELISM": "false", "DB_PASS": "pw"}
    cmd = build_launch_command(ServerSpec(model_path="m", env=env), Variant())
    words = shlex.split(cmd.shell())
    shown = {"X_TOKEN_FACTOR=0.5", "SGLANG_MAX_TOKENS=4096", "TOKENIZERS_PARALLELISM=false"}
    assert shown | {"HF_TOKEN=***", "DB_PASS=***"} <= set(words)
    assert "hf_abc" not in cmd.shell() and "=pw" not in cmd.shell()


def test_the_recorded_config_shows_knobs_and_hides_secrets():
    data = {
        "server": {"model_path": "m", "env": {"X_TOKEN_FACTOR": "0.5", "OPENAI_API_KEY": "sk"}},
        "step_sweep": {"draft_model_path": "d", "num_steps": [2]},
    }
    env = json.loads(redacted_config_json(parse_config(data)))["server"]["env"]
    assert env == {"X_TOKEN_FACTOR": "0.5", "OPENAI_API_KEY": "***"}


def test_a_knob_enters_the_variant_name_and_a_secret_does_not():
    def label(env: dict[str, str]) -> str:
        return Variant(algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1, env=env).label

    assert label({"X_TOKEN_FACTOR": "0.5"}) != label({})  # it changes the server
    assert label({"X_TOKEN_FACTOR": "0.5"}) != label({"X_TOKEN_FACTOR": "0.25"})
    assert label({"HF_TOKEN": "hf_1"}) == label({}) == label({"HF_TOKEN": "hf_2"})
