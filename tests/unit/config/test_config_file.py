from pathlib import Path

import pytest

from specsweep.config.file import load_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("name", ["sim.yaml", "gpu-host.yaml"])
def test_examples_are_valid(name):
    cfg = load_config(EXAMPLES / name)
    assert sweep_variants(cfg)[0].is_baseline


def test_overrides_parse_yaml_values():
    cfg = load_config(
        EXAMPLES / "sim.yaml",
        ["load.output_len=32", "load.concurrency=[1, 8]", "step_sweep.num_steps=[2]",
         "server.env.EXTRA=yes"],
    )  # fmt: skip
    assert cfg.load.output_len == 32 and cfg.load.concurrency == [1, 8]
    assert cfg.step_sweep.num_steps == [2]
    assert cfg.server.env["EXTRA"] == "True"


def test_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"load.ouput_len: unknown key"):
        load_config(EXAMPLES / "sim.yaml", ["load.ouput_len=3"])
    with pytest.raises(ConfigError, match=r"server.port: Input should be less than"):
        load_config(EXAMPLES / "sim.yaml", ["server.port=70000"])
    with pytest.raises(ConfigError, match=r"expected key\.path=value"):
        load_config(EXAMPLES / "sim.yaml", ["load.output_len"])
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("server: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
