"""`secret:NAME` in env: the server gets the Secret block's value, nothing else stores it."""

from __future__ import annotations

import uuid

import psutil
import pytest
from prefect.blocks.system import Secret

import tasks.secrets  # noqa: F401 - plugs Prefect Secret blocks into the engine
from specsweep import pipeline
from specsweep.config_file import parse_config
from specsweep.plan import BASELINE
from specsweep.runs import redacted_config_json
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow]


def test_a_secret_reference_reaches_only_the_server(tmp_path, port):
    value = f"hf_{uuid.uuid4().hex}"
    block = f"hf-token-{uuid.uuid4().hex[:8]}"
    Secret(value=value).save(block)
    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["HF_TOKEN"] = f"secret:{block}"
    config = parse_config(data)
    handle = pipeline.launch(config, BASELINE, "secret-ref")
    try:
        assert psutil.Process(handle.pid).environ()["HF_TOKEN"] == value
    finally:
        pipeline.teardown(config, handle)
    assert value not in config.model_dump_json()  # what Prefect stores as the parameter
    assert value not in redacted_config_json(config)
    log = handle.log_path.read_text()
    assert value not in log and "HF_TOKEN=***" in log
