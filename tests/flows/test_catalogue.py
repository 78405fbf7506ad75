from prefect.utilities.callables import parameter_schema

from specsweep.deployments.catalogue import CATALOGUE, runner_deployments


def test_every_entry_resolves_to_a_deployment_with_a_config_form():
    deployments = runner_deployments()
    assert [d.name for d in deployments] == [e.name for e in CATALOGUE]
    for entry in CATALOGUE:
        schema = parameter_schema(entry.flow).model_dump()
        assert {"config", "run_id", "force"} <= set(schema["properties"])
        server = schema["definitions"]["ServerSpec"]["properties"]
        assert server["model_path"]["description"]  # the UI form explains fields


def test_nightly_schedule_and_form_defaults_come_from_the_config(sim_config):
    from specsweep.config.schedule import NightlySchedule

    deployments = {d.name: d for d in runner_deployments(sim_config, NightlySchedule("5 3 * * 1"))}
    assert set(deployments) == {
        "step-sweep", "topk-sweep", "algorithm-sweep", "matrix-sweep", "nightly-regression",
    }  # fmt: skip
    [nightly] = deployments["nightly-regression"].schedules
    assert (nightly.schedule.cron, nightly.schedule.timezone) == ("5 3 * * 1", "Europe/Berlin")
    assert nightly.active
    for d in deployments.values():
        assert d.parameters["config"]["target"]["more"]["name"] == "test-host"
        assert (
            d.entrypoint == f"specsweep.flows.{d.name.replace('-', '_')}.{d.name.replace('-', '_')}"
        )
    # Without a config a scheduled run would have nothing to run: registered, but paused.
    [bare] = {d.name: d for d in runner_deployments()}["nightly-regression"].schedules
    assert not bare.active


def test_each_form_puts_run_id_first_and_holds_only_what_its_flow_reads(sim_config):
    from specsweep.flows.step_sweep import step_sweep_run_name

    deployments = {d.name: d for d in runner_deployments(sim_config)}
    for d in deployments.values():
        properties = d._parameter_openapi_schema.properties
        assert min(properties, key=lambda k: properties[k]["position"]) == "run_id"
        assert d.enforce_parameter_schema is False  # the file's shape is given too (--param)
    step = deployments["step-sweep"].parameters["config"]
    assert "step_sweep" in step and not {"topk_sweep", "grid_sweep", "variants"} & set(step)
    assert "topk_sweep" in deployments["topk-sweep"].parameters["config"]
    assert "step_sweep" not in deployments["topk-sweep"].parameters["config"]
    assert {"variants", "grid_sweep"} <= set(deployments["matrix-sweep"].parameters["config"])
    # a run created from the form's values is named as one from the config file's
    file_shaped = {"config": sim_config.model_dump(mode="json")}
    assert step_sweep_run_name({"config": step}) == step_sweep_run_name(file_shaped)
    assert step_sweep_run_name({"config": step}) == "step-sweep/test-host/steps=2/c=1,4"
