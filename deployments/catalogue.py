"""The catalogue of deployments; `python -m deployments.catalogue` serves them all.

Serving runs flows from the Prefect UI (a form built from the flows' pydantic
parameters) on this machine, with no work pool to set up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import Flow, serve
from prefect.deployments.runner import RunnerDeployment

from flows.step_sweep import step_sweep


@dataclass(frozen=True)
class DeploymentEntry:
    name: str
    flow: Flow
    description: str
    tags: tuple[str, ...] = field(default_factory=tuple)


CATALOGUE: tuple[DeploymentEntry, ...] = (
    DeploymentEntry(
        name="step-sweep",
        flow=step_sweep,
        description="Baseline plus one speculative variant per num_steps, every level.",
        tags=("specsweep", "step-sweep"),
    ),
)


def runner_deployments() -> list[RunnerDeployment]:
    return [
        e.flow.to_deployment(name=e.name, description=e.description, tags=list(e.tags))
        for e in CATALOGUE
    ]


def main() -> None:
    serve(*runner_deployments())


if __name__ == "__main__":
    main()
