"""The run forms (issue 28): views of a SweepConfig, in the config file's shape or theirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from specsweep.config import SweepConfig
from specsweep.config.file import load_config
from specsweep.config.forms import (
    FOLDS,
    MatrixSweepForm,
    StepSweepForm,
    TargetForm,
    TopkSweepForm,
    sweep_config,
)
from specsweep.config.targets import LocalTarget, SshTarget

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FORMS = (StepSweepForm, TopkSweepForm, MatrixSweepForm)


def ssh_config(sim_config: SweepConfig) -> SweepConfig:
    target = {"kind": "ssh", "name": "gpu-1", "host": "gpu1.lan", "user": "bench",
              "verify_host_key": False, "workdir": "sweeps"}  # fmt: skip
    return SweepConfig.model_validate({**sim_config.model_dump(), "target": target})


@pytest.mark.parametrize("fold", FOLDS.values(), ids=FOLDS.keys())
def test_every_setting_of_a_section_is_in_its_form_once(fold):
    assert sorted(fold.names) == sorted(fold.source.model_fields)
    groups = [*fold.groups, *(g for _, part in fold.groups.values() for g in part.groups)]
    assert not set(groups) & set(fold.source.model_fields)  # a group never hides a field


def test_the_target_form_has_every_setting_of_both_kinds():
    more = TargetForm.model_fields["more"].annotation.__args__[0]
    ssh = more.model_fields["ssh"].annotation.__args__[0]
    shown = {*TargetForm.model_fields, *more.model_fields, *ssh.model_fields} - {"more", "ssh"}
    assert shown == set(SshTarget.model_fields)


def unread_cleared(config: SweepConfig, form: type) -> SweepConfig:
    """The config as a form shows it: the sweep sections the form lacks left out."""
    unset = {"step_sweep": None, "topk_sweep": None, "grid_sweep": None, "variants": []}
    return config.model_copy(update={k: v for k, v in unset.items() if k not in form.model_fields})


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("example", ["sim.yaml", "gpu-host.yaml"])
def test_a_config_survives_its_form(form, example):
    config = load_config(EXAMPLES / example, [])
    shown = form.model_validate(form.values_of(config))
    assert shown.sweep == unread_cleared(config, form)
    # what the UI submits: the form's values as JSON
    assert sweep_config(shown.model_dump(mode="json")) == unread_cleared(config, form)


def test_the_file_shape_the_form_shape_and_a_sweep_config_give_one_config(sim_config):
    for config in (sim_config, ssh_config(sim_config)):
        values = StepSweepForm.values_of(config)
        assert StepSweepForm.model_validate(config).sweep == config
        assert StepSweepForm.model_validate(config.model_dump(mode="json")).sweep == config
        assert StepSweepForm.model_validate(values).sweep == config
        assert MatrixSweepForm.model_validate(StepSweepForm.model_validate(values)).sweep == config


def test_the_target_is_flat_and_its_ssh_settings_folded(sim_config):
    local = StepSweepForm.values_of(sim_config)["target"]
    workdir = str(sim_config.target.workdir)
    assert local == {"kind": "local", "more": {"name": "test-host", "workdir": workdir,
                     "tolerate_foreign_gpu": False, "ssh": None}}  # fmt: skip
    at_defaults = sim_config.model_copy(update={"target": LocalTarget()})
    assert StepSweepForm.values_of(at_defaults)["target"] == {"kind": "local", "more": None}
    remote = StepSweepForm.values_of(ssh_config(sim_config))["target"]
    assert (remote["kind"], remote["host"], remote["more"]["workdir"]) == (
        "ssh", "gpu1.lan", "sweeps")  # fmt: skip
    ssh = remote["more"]["ssh"]
    assert ssh["user"] == "bench" and ssh["verify_host_key"] is False


def test_a_group_is_folded_while_all_its_settings_have_their_defaults(sim_config):
    values = StepSweepForm.values_of(sim_config)
    assert values["server"]["more"]["launch"] is None
    assert values["load"]["more"]["precision"] is None
    assert values["more"]["search"] is None  # the default grid (more: the results' dir)
    changed = sim_config.model_copy(
        update={"load": sim_config.load.model_copy(update={"repeats": 3})}
    )
    precision = StepSweepForm.values_of(changed)["load"]["more"]["precision"]
    assert precision["repeats"] == 3 and precision["max_repeats"] == 5
    # at its defaults every section is its main fields and folded groups: a few rows
    defaults = StepSweepForm.values_of(
        SweepConfig(
            server={"model_path": "org/target"},
            step_sweep={"draft_model_path": "org/draft", "num_steps": [1, 2]},
        )
    )
    assert defaults["target"]["more"] is None and defaults["more"] is None
    assert defaults["server"]["more"] is None and defaults["load"]["more"] is None
    assert defaults["step_sweep"]["more"] is None


def test_sections_the_flow_does_not_read_are_not_in_its_form_but_still_checked(sim_config):
    schema = StepSweepForm.model_json_schema()
    assert not {"topk_sweep", "grid_sweep", "variants"} & set(schema["properties"])
    assert {"topk_sweep", "grid_sweep", "variants"} <= set(MatrixSweepForm.model_fields)
    data = sim_config.model_dump(mode="json")
    given = StepSweepForm.model_validate({**data, "topk_sweep": {"topk": [1, 2]}})
    assert given.sweep.topk_sweep is not None  # validated, kept, not run by the step sweep
    with pytest.raises(ValidationError, match="topk repeat"):
        StepSweepForm.model_validate({**data, "topk_sweep": {"topk": [2, 2]}})


def test_the_config_files_rules_judge_the_forms_values(sim_config):
    values = StepSweepForm.values_of(sim_config)
    more = values["server"]["more"]
    bad = {
        **values,
        "server": {**values["server"], "more": {**more, "extra_args": ["--port", "1"]}},
    }
    with pytest.raises(ValidationError, match="set by specsweep from the server/variant"):
        StepSweepForm.model_validate(bad)
    local_with_host = {**values, "target": {**values["target"], "host": "gpu1"}}
    with pytest.raises(ValidationError, match="host"):
        StepSweepForm.model_validate(local_with_host)
    with pytest.raises(ValidationError, match="typo"):
        StepSweepForm.model_validate({**values, "load": {**values["load"], "typo": 1}})


def test_lists_of_numbers_are_one_text_row_and_come_back_as_lists(sim_config):
    """Concurrency levels, steps and topk show as "1, 2, 4" (one row, not one per item)."""
    schema = StepSweepForm.model_json_schema()["$defs"]
    concurrency = schema["LoadSpec"]["properties"]["concurrency"]
    assert concurrency["type"] == "string" and concurrency["default"] == "1, 2, 4, 8, 16, 32, 64"
    assert schema["StepSweep"]["properties"]["num_steps"]["type"] == "string"
    values = StepSweepForm.values_of(sim_config)
    assert values["load"]["concurrency"] == ", ".join(map(str, sim_config.load.concurrency))
    typed = {**values, "load": {**values["load"], "concurrency": "1 2, 16"}}
    assert StepSweepForm.model_validate(typed).sweep.load.concurrency == [1, 2, 16]
    listed = {**values, "load": {**values["load"], "concurrency": [1, 4]}}  # the file's shape
    assert StepSweepForm.model_validate(listed).sweep.load.concurrency == [1, 4]
    # the config's rules judge the numbers, with their messages
    for bad, why in (
        ("1, x", "valid integer"),
        ("4, 4", "repeat"),
        ("0, 2", "greater than or equal to 1"),
    ):
        with pytest.raises(ValidationError, match=why):
            StepSweepForm.model_validate({**values, "load": {**values["load"], "concurrency": bad}})


def test_the_runs_label_and_search_sit_under_more(sim_config):
    assert "name" not in StepSweepForm.model_fields and "search" not in StepSweepForm.model_fields
    data = {**sim_config.model_dump(mode="json"), "search": "adaptive", "name": "nightly"}
    adaptive = SweepConfig.model_validate(data)
    more = StepSweepForm.values_of(adaptive)["more"]
    assert more["name"] == "nightly" and more["search"] is not None
    assert StepSweepForm.model_validate(StepSweepForm.values_of(adaptive)).sweep == adaptive
