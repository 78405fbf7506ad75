"""The crash/cancellation hook stops the server from the launch record alone."""

from uuid import uuid4

import psutil
from prefect.client.schemas.objects import FlowRun
from prefect.states import Cancelled

from specsweep.config.plan import BASELINE
from specsweep.flows.benchmark_variant import benchmark_variant
from specsweep.flows.hooks import kill_recorded_servers
from specsweep.targets.local import LocalRunner
from tests.integration.sim_server import variant_server


def test_hook_kills_the_recorded_server_without_its_handle(sim_config):
    server = variant_server(sim_config, BASELINE, "hook-run")
    server.kill_stale()
    handle = server.launch()
    try:
        assert psutil.pid_exists(handle.pid)
        run = FlowRun(
            flow_id=uuid4(), name="variant/baseline",
            parameters={"config": sim_config.model_dump(mode="json")},
        )  # fmt: skip
        kill_recorded_servers(benchmark_variant, run, Cancelled())
        assert not LocalRunner(sim_config.target.workdir).is_alive(handle)
        assert LocalRunner(sim_config.target.workdir).state.entries() == []
    finally:
        server.teardown()
