"""`secret:NAME` in env: the server gets the Secret block's value, nothing else stores it."""

from __future__ import annotations

import uuid

import psutil
import pytest
from prefect.blocks.system import Secret

from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.flows.prefect_secrets import use_prefect_secrets
from specsweep.results.runs import redacted_config_json
from tests.conftest import sim_config_data
from tests.integration.sim_server import variant_server

pytestmark = [pytest.mark.flow]


def test_a_secret_reference_reaches_only_the_server(tmp_path, port):
    use_prefect_secrets()
    value = f"hf_{uuid.uuid4().hex}"
    block = f"hf-token-{uuid.uuid4().hex[:8]}"
    Secret(value=value).save(block)
    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["HF_TOKEN"] = f"secret:{block}"
    config = parse_config(data)
    server = variant_server(config, BASELINE, "secret-ref")
    server.kill_stale()
    handle = server.launch()
    try:
        # Popen returns when exec closes its close-on-exec pipe, before the kernel has set up
        # the new image's environment block: /proc/PID/environ can read empty until then.
        # A server that answers has long finished exec.
        server.wait_for_health()
        assert psutil.Process(handle.pid).environ()["HF_TOKEN"] == value
    finally:
        server.teardown()
    assert value not in config.model_dump_json()  # what Prefect stores as the parameter
    assert value not in redacted_config_json(config)
    log = handle.log_path.read_text()
    assert value not in log and "HF_TOKEN=***" in log
