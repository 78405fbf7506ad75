"""A Prefect project with its own `flows`, `tasks` and `deployments` packages (issue 28).

specsweep installs its layers as specsweep.flows, specsweep.tasks and
specsweep.deployments, so from such a directory a sweep runs through every entry point
that starts Python there, and `import flows` there gets the user's package. The user's
packages hold a module of every name specsweep's do, each failing when imported
(tests/conftest.py's write_user_packages). The Prefect worker whose working directory
holds them is tests/e2e's stack: its project directory has them too.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import USER_PACKAGES, sim_config_data, write_user_packages


def python_in(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`python ARGV...` as a user runs it in the project: its working directory first on
    sys.path, no path of the test session's. On the session's Prefect API
    (tests/flows/conftest.py), which spares each run the start of a temporary one."""
    from prefect.settings import PREFECT_API_URL

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    return subprocess.run(
        [sys.executable, *argv], cwd=project, env=env, capture_output=True, text=True, timeout=240
    )


@pytest.fixture
def project(tmp_path: Path, port: int) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    write_user_packages(project)
    data = sim_config_data(project, port, load={"concurrency": [1]})
    (project / "sweep.yaml").write_text(yaml.safe_dump(data))
    return project


def measured(project: Path, run_id: str) -> list[tuple[str, int]]:
    levels = pd.read_parquet(project / "results" / "levels" / run_id)
    assert set(levels["status"]) == {"ok"}
    return sorted(zip(levels["variant"], levels["concurrency"], strict=True))


SWEEP = [("baseline", 1), ("eagle3-s2-k1-d3", 1)]


def test_the_cli_runs_a_sweep_from_a_directory_with_its_own_flows(project):
    proc = python_in(
        project, "-m", "specsweep.cli", "run", "step-sweep", "-c", "sweep.yaml",
        "--run-id", "from-cli",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert measured(project, "from-cli") == SWEEP


# A script or a notebook in the project: `import flows` gets the user's package, every
# deployment's entrypoint loads specsweep's flow (as the process that a Prefect worker
# starts there does), and what `specsweep run step-sweep` calls runs a sweep.
SCRIPT = """\
import inspect, json, sys, typer
import flows, tasks, deployments
from prefect.flows import load_flow_from_entrypoint
from specsweep.cli.sweep_runner import run_sweep_now
from specsweep.config.file import load_config
from specsweep.deployments.catalogue import runner_deployments

print(json.dumps({
    "user": [(m.__file__, m.OWNER) for m in (flows, tasks, deployments)],
    "entrypoints": {
        d.entrypoint: inspect.getfile(load_flow_from_entrypoint(d.entrypoint).fn)
        for d in runner_deployments()
    },
}))
try:
    run_sweep_now("step-sweep", load_config("sweep.yaml"), "from-python", force=False)
except typer.Exit as exit:
    sys.exit(exit.exit_code)
"""


def test_python_there_gets_the_users_flows_and_runs_specsweeps(project):
    from specsweep.deployments.catalogue import CATALOGUE

    proc = python_in(project, "-c", SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout.splitlines()[0])
    assert found["user"] == [[str(project / n / "__init__.py"), "user"] for n in USER_PACKAGES]
    assert found["entrypoints"] == {
        f"{e.flow.fn.__module__}.{e.flow.fn.__name__}": inspect.getfile(e.flow.fn)
        for e in CATALOGUE
    }
    assert all(entrypoint.startswith("specsweep.flows.") for entrypoint in found["entrypoints"])
    assert not any(path.startswith(str(project)) for path in found["entrypoints"].values())
    assert measured(project, "from-python") == SWEEP
