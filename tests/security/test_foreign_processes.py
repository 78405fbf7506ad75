"""The pre-launch cleanup never touches what it cannot prove is ours.

A foreign listener on the server's port and a foreign process holding memory on the
target GPU (the simulator's nvidia-smi stand-in reports it) at the same time: the
run's kill-stale step refuses, names both in one message, and both survive.
tests/integration/test_cleanup.py and test_gpu_cleanup.py cover each alone at the
`kill_stale` level; this goes through the sweep config and `pipeline`, like a run.
"""

from __future__ import annotations

import pytest

from specsweep import pipeline
from specsweep.config.file import parse_config
from specsweep.errors import StaleProcessError
from tests.conftest import free_port, sim_config_data
from tests.integration.test_cleanup import procs, spawn  # noqa: F401 (fixture)
from tests.integration.test_gpu_cleanup import alive, host  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


def test_foreign_port_holder_and_foreign_gpu_process_both_survive(tmp_path, host, procs):  # noqa: F811
    port = free_port()
    listener = spawn("-m", "http.server", "--bind", "127.0.0.1", str(port), port=port)
    procs.append(listener)
    trainer = host.holder(0, 8000, "sleep", "600")  # not sglang: not provably ours
    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["CUDA_VISIBLE_DEVICES"] = "0"
    config = parse_config(data)

    with pytest.raises(StaleProcessError) as info:
        pipeline.kill_stale_servers(config)
    message = str(info.value)
    assert f"port {port} is held by" in message and f"pid {listener.pid}" in message
    assert "http.server" in message
    assert f"pid {trainer}" in message and "8000 MiB on GPU 0" in message
    assert "run with force=True" in message
    assert listener.poll() is None and alive(trainer)
    assert host.used(0) == 8000  # its memory untouched too
