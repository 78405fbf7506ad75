"""A fleet host's names on the Prefect server (its queue, its facts variable), what its
worker publishes, and the config of a calibration run."""

from __future__ import annotations

import pytest
from prefect.types.names import raise_on_name_alphanumeric_dashes_underscores_only

from specsweep.config.file import parse_config
from specsweep.errors import ConfigError
from specsweep.fleet.hosts import facts_from_value, facts_value, facts_variable, host_queue
from specsweep.flows.fleet_variant import only_levels
from specsweep.targets.server_facts import ServerFacts
from tests.conftest import sim_config_data


@pytest.mark.parametrize(
    ("pool", "host"),
    [("specsweep-fleet", "gpu-a"), ("Lab Pool", "GPU.1=a"), ("p" * 200, "h" * 128)],
)
def test_a_facts_variable_name_is_one_prefect_takes(pool, host):
    name = facts_variable(pool, host)
    assert raise_on_name_alphanumeric_dashes_underscores_only(name) == name
    assert len(name) <= 255


def test_readable_names_stay_readable_and_folded_ones_stay_apart():
    assert facts_variable("specsweep-fleet", "gpu-a") == "specsweep-facts-specsweep-fleet-gpu-a"
    folded = {facts_variable("lab", h) for h in ("GPU-A", "gpu-a", "gpu.a", "gpu_a")}
    assert len(folded) == 4
    assert facts_variable("lab", "gpu-a") != facts_variable("lab2", "gpu-a")
    assert host_queue("gpu-a") == "host-gpu-a"


def test_published_facts_read_back_and_no_gpu_reads_unknown():
    facts = ServerFacts("0.5.23-sim", True, "simulated", 2, None, "box")
    value = facts_value(facts, "gpu-a")
    assert value["host"] == "gpu-a" and value["checked_at"]
    assert facts_from_value(value) == {
        "gpu_name": "simulated", "gpu_count": 2, "driver_version": None,
    }  # fmt: skip
    assert facts_from_value(facts_value(ServerFacts(), "gpu-a")) is None
    assert facts_from_value("not a dict") is None and facts_from_value(None) is None


def test_a_calibration_run_measures_only_its_level(tmp_path):
    config = parse_config(sim_config_data(tmp_path, 30000))
    only = only_levels(config, [4])
    assert only.load.concurrency == [4] and only.load.shape == config.load.shape
    with pytest.raises(ConfigError, match=r"some of load\.concurrency"):
        only_levels(config, [3])


def test_a_calibration_run_of_several_shapes_keeps_them_all(tmp_path):
    """Level files are named by shape only in a run of several shapes: a one-shape
    calibration would store the level under a name the full baseline never looks for."""
    data = sim_config_data(tmp_path, 30000)
    data["load"] |= {"input_len": [16, 64]}
    config = parse_config(data)
    only = only_levels(config, [1])
    assert only.load.multi_shape and only.load.shape_list() == config.load.shape_list()
