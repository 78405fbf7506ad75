"""The configuration recorded with a run (runs table) hides every secret-looking env
value, whichever section holds it: server, step_sweep, topk_sweep or a variant."""

from __future__ import annotations

import json
import uuid

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsweep.config import SweepConfig, secrets
from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import ConfigError
from specsweep.results.runs import redacted_config_json
from tests.conftest import sim_config_data
from tests.integration.sim_server import ready_server
from tests.integration.test_cleanup import listening

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


def _launched_env(config: SweepConfig) -> tuple[dict[str, str], str]:
    """Launch the config's baseline server, read its environment and its log, and stop
    it whatever happens: the one place this file starts a server. Read once it answers:
    right after Popen returns, exec may not have set up the environment block yet."""
    with ready_server(config, BASELINE, "secret-ref") as server:
        assert server.handle is not None
        return psutil.Process(server.handle.pid).environ(), server.handle.log_path.read_text()


@pytest.mark.integration
def test_env_secret_references_are_resolved_only_at_launch(tmp_path, port):
    """The configuration (and what is stored of it) keeps `secret:hf`; the secret store is
    asked once, by the launch, and only the server process's environment holds the value."""
    value = f"hf_{uuid.uuid4().hex}"
    asked: list[str] = []

    def store(name: str) -> str:  # the secret store the flows plug in (Prefect Secret blocks)
        asked.append(name)
        return {"hf": value}[name]

    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["HF_TOKEN"] = "secret:hf"
    previous = secrets._resolver
    secrets.set_secret_resolver(store)
    try:
        config = parse_config(data)
        parameter = config.model_dump_json()  # what Prefect stores as the flow run's parameter
        recorded = redacted_config_json(config)  # what the runs table stores
        assert asked == []  # nothing resolved before the launch
        environ, log = _launched_env(config)
    finally:
        secrets.set_secret_resolver(previous)
    assert asked == ["hf"]
    assert environ["HF_TOKEN"] == value
    assert config.server.env["HF_TOKEN"] == "secret:hf"
    assert '"HF_TOKEN":"secret:hf"' in parameter and value not in parameter
    assert value not in recorded and value not in log and "HF_TOKEN=***" in log


@pytest.mark.integration
def test_a_secret_reference_without_a_secret_store_launches_nothing(tmp_path, port):
    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["HF_TOKEN"] = "secret:hf"
    config = parse_config(data)
    previous = secrets._resolver
    secrets.set_secret_resolver(None)
    try:
        with pytest.raises(ConfigError, match=r"env\.HF_TOKEN names a secret"):
            _launched_env(config)
    finally:
        secrets.set_secret_resolver(previous)
    assert not listening(port)


def test_plain_secret_values_are_found_for_a_warning():
    from specsweep.config.secrets import literal_secret_names

    envs = [{"HF_TOKEN": "hf_x", "CUDA_VISIBLE_DEVICES": "0"}, {"MY_API_KEY": "secret:k"}]
    assert literal_secret_names(envs) == ["HF_TOKEN"]
