"""Load shapes and workload settings: validated and resolved before anything starts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specsweep.config import LoadSpec
from specsweep.config.command import build_launch_command
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError
from tests.conftest import sim_config_data


def test_lists_of_lengths_become_shapes_inputs_outermost():
    load = LoadSpec(input_len=[512, 4096], output_len=[128, 256])
    assert [s.label for s in load.shapes] == [
        "in512-out128", "in512-out256", "in4096-out128", "in4096-out256",
    ]  # fmt: skip
    assert (load.input_len, load.output_len) == (512, 128)  # the first shape's
    again = LoadSpec.model_validate(load.model_dump())  # a Prefect parameter round trip
    assert again.shape_list() == load.shape_list()
    assert load.multi_shape and not LoadSpec().multi_shape


def test_explicit_shapes_and_one_shape_loads():
    load = LoadSpec(
        shapes=[{"input_len": 8192, "output_len": 64}, {"input_len": 512, "output_len": 64}]
    )
    assert (load.input_len, load.output_len) == (8192, 64)
    cell = load.for_shape(load.shapes[1])
    assert (cell.input_len, cell.output_len, cell.shapes) == (512, 64, [])
    assert LoadSpec(input_len=300, output_len=20).shape_list()[0].label == "in300-out20"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"shapes": [{"input_len": 1, "output_len": 1}] * 2}, "shapes repeat"),
        ({"shapes": [{"input_len": 1, "output_len": 1}], "input_len": [1, 2]}, "not both"),
        ({"input_len": [512, 4096], "prompt_length": "natural"}, "cannot be a dimension"),
        ({"dataset_format": "replay"}, "dataset_format needs a dataset"),
        ({"input_len": []}, "at least one value"),
        ({"input_len": [0, 5]}, "greater than or equal to 1"),
    ],
)
def test_bad_shapes_are_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        LoadSpec(**fields)


def test_endpoint_follows_the_prompts():
    assert LoadSpec().resolved_endpoint() == "generate"
    assert LoadSpec(prompts="builtin").resolved_endpoint() == "chat"
    assert LoadSpec(prompts="builtin", endpoint="completions").resolved_endpoint() == "completions"


def _config(tmp_path, backend="simulator", **load):
    data = sim_config_data(tmp_path, 1, load=load)
    data["server"] = {**data["server"], "backend": backend}
    return parse_config(data)


def test_auto_prompts_are_real_text_for_speculation_on_real_sglang(tmp_path):
    assert _config(tmp_path, "sglang").load.prompts == "builtin"
    assert _config(tmp_path).load.prompts == "random"  # the simulator: random ids
    baseline_only = sim_config_data(tmp_path, 1, server={"backend": "sglang"})
    del baseline_only["step_sweep"]
    baseline_only["variants"] = [{"name": "baseline"}]
    assert parse_config(baseline_only).load.prompts == "random"
    chosen = _config(tmp_path, "sglang", prompts="random")
    assert chosen.load.prompts == "random"  # an explicit choice stays


def test_context_length_is_on_the_command_line_and_owned(tmp_path):
    config = parse_config(sim_config_data(tmp_path, 1, server={"context_length": 32768}))
    _, spec = sweep_variants(config)
    argv = build_launch_command(config.server, spec).argv
    assert argv[argv.index("--context-length") + 1] == "32768"
    with pytest.raises(ConfigError, match="--context-length"):
        parse_config(sim_config_data(tmp_path, 1, server={"extra_args": ["--context-length", "8"]}))


def test_each_shape_after_the_first_sends_prompts_of_its_own():
    load = LoadSpec(input_len=[512, 4096], seed=3)
    first, second = (load.for_shape(s) for s in load.shapes)
    assert first.seed == 3  # a single-shape load's prompts are unchanged
    assert second.seed != 3  # else its prompts would start with the first shape's
