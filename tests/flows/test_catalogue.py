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
