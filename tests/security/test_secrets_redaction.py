"""The configuration recorded with a run (runs table) hides every secret-looking env
value, whichever section holds it: server, step_sweep, topk_sweep or a variant."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsweep.config.file import parse_config
from specsweep.errors import ConfigError
from specsweep.results.runs import redacted_config_json

SECRET_NAMES = st.sampled_from(
    ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "MY_SECRET", "DB_PASSWORD"]
)
_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")
SECTIONS = ("server", "step_sweep", "topk_sweep", "variants")


@settings(max_examples=60, deadline=None)
@given(name=SECRET_NAMES, section=st.sampled_from(SECTIONS), value=st.text(_CHARS, min_size=8))
def test_secret_env_values_are_redacted_in_every_section(name, section, value):
    value = f"s3cr3t-{value}"
    data = {
        "server": {"model_path": "m", "max_running_requests": 8},
        "step_sweep": {"draft_model_path": "d", "num_steps": [2]},
        "topk_sweep": {"draft_model_path": "d", "topk": [1]},
        "variants": [{}],
    }
    env = {name: value, "PLAIN": "visible"}
    if section == "variants":
        data["variants"][0]["env"] = env
    else:
        data[section]["env"] = env
    recorded = json.loads(redacted_config_json(parse_config(data)))
    text = json.dumps(recorded, ensure_ascii=False)  # as stored, minus the \u escapes
    assert value not in text and '"PLAIN": "visible"' in text


def test_secret_flag_values_are_hidden_but_token_counts_are_not():
    from specsweep.config.redact import redact_args

    argv = ["--api-key", "sk-1", "--hf-token=hf_2", "--speculative-num-draft-tokens", "4"]
    argv += ["--tokenizer-path", "tok/p", "--max-total-tokens", "9", "--admin-api-key", "k3"]
    assert redact_args(argv) == [
        "--api-key", "***", "--hf-token=***", "--speculative-num-draft-tokens", "4",
        "--tokenizer-path", "tok/p", "--max-total-tokens", "9", "--admin-api-key", "***",
    ]  # fmt: skip


def test_env_secret_references_are_resolved_only_at_launch(monkeypatch):
    from specsweep.config import secrets

    monkeypatch.setattr(secrets, "_resolver", {"hf": "hf_value"}.__getitem__)
    env = {"HF_TOKEN": "secret:hf", "PLAIN": "x"}
    assert secrets.resolve_env(env) == {"HF_TOKEN": "hf_value", "PLAIN": "x"}
    monkeypatch.setattr(secrets, "_resolver", None)
    with pytest.raises(ConfigError, match=r"env\.HF_TOKEN names a secret"):
        secrets.resolve_env(env)


def test_plain_secret_values_are_found_for_a_warning():
    from specsweep.config.secrets import literal_secret_names

    envs = [{"HF_TOKEN": "hf_x", "CUDA_VISIBLE_DEVICES": "0"}, {"MY_API_KEY": "secret:k"}]
    assert literal_secret_names(envs) == ["HF_TOKEN"]
