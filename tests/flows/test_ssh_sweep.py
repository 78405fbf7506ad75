"""A step sweep through the real flows on an SSH target (a real sshd on 127.0.0.1),
with the key read from a Prefect Secret block and never written anywhere."""

from __future__ import annotations

import uuid

import pytest
from prefect.blocks.system import Secret

from specsweep.config.file import parse_config
from specsweep.flows.step_sweep import step_sweep
from specsweep.flows.target_lock import ensure_target_limit
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data
from tests.flows.api_records import run_logs
from tests.flows.test_step_sweep_flow import no_server_left

pytestmark = [pytest.mark.flow, pytest.mark.slow, pytest.mark.integration]


def test_step_sweep_on_an_ssh_target_with_the_key_in_a_secret_block(tmp_path, port, sshd):
    key_text = sshd.key_file.read_text()
    block = f"specsweep-test-key-{uuid.uuid4().hex[:8]}"
    Secret(value=key_text).save(block)
    data = sim_config_data(tmp_path, port)
    target = sshd.target(tmp_path / "remote", key_secret=block)
    del target["key_file"]
    data["target"] = target
    config = parse_config(data)
    ensure_target_limit("specsweep-target-ssh-test")

    state = step_sweep(config, return_state=True)
    assert state.is_completed(), state.message
    run_id = state.result()["run_id"]
    levels = ResultsStore(config.results_dir).read_levels(run_id)
    assert len(levels) == 4 and set(levels["status"]) == {"ok"}
    assert set(levels["target"]) == {"ssh-test"}
    assert no_server_left(port)

    secret_line = key_text.strip().splitlines()[1]  # a line of the key body
    for path in [*config.results_dir.rglob("*"), *(tmp_path / "remote").rglob("*.log")]:
        if path.is_file():
            assert secret_line.encode() not in path.read_bytes(), path
    logs = run_logs(state)  # this run's and its subflows', flushed
    assert f"log: {tmp_path}/remote/logs/{run_id}/baseline.log" in logs
    assert secret_line not in logs
