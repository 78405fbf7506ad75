from prefect.utilities.callables import parameter_schema

from deployments.catalogue import CATALOGUE, runner_deployments


def test_every_entry_resolves_to_a_deployment_with_a_config_form():
    deployments = runner_deployments()
    assert [d.name for d in deployments] == [e.name for e in CATALOGUE]
    for entry in CATALOGUE:
        schema = parameter_schema(entry.flow).model_dump()
        assert {"config", "run_id", "force"} <= set(schema["properties"])
        server = schema["definitions"]["ServerSpec"]["properties"]
        assert server["max_running_requests"]["description"]  # the UI form explains fields


def test_nightly_schedule_and_form_defaults_come_from_the_config(sim_config):
    from specsweep.config.schedule import NightlySchedule

    deployments = {d.name: d for d in runner_deployments(sim_config, NightlySchedule("5 3 * * 1"))}
    assert set(deployments) == {"step-sweep", "topk-sweep", "matrix-sweep", "nightly-regression"}
    [nightly] = deployments["nightly-regression"].schedules
    assert (nightly.schedule.cron, nightly.schedule.timezone) == ("5 3 * * 1", "Europe/Berlin")
    assert nightly.active
    for d in deployments.values():
        assert d.parameters["config"]["target"]["name"] == "test-host"
        assert d.entrypoint == f"flows.{d.name.replace('-', '_')}.{d.name.replace('-', '_')}"
    # Without a config a scheduled run would have nothing to run: registered, but paused.
    [bare] = {d.name: d for d in runner_deployments()}["nightly-regression"].schedules
    assert not bare.active
