"""The fleet file, a host's view of the sweep config, and a host's pre-flight check."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.config.file import parse_config
from specsweep.config.fleet import (
    HOST_ENV,
    config_for_host,
    current_host,
    load_fleet,
    parse_fleet,
)
from specsweep.errors import ConfigError, HostUnavailable
from specsweep.targets.preflight import check_host
from tests.conftest import free_port, sim_config_data

runner = CliRunner()


def fleet_data(**kw) -> dict:
    hosts = [
        {"name": "gpu-a", "gpus": [0, 1], "port": 31000},
        {"name": "gpu-b", "target": {"kind": "ssh", "host": "gpu-b.lan"}},
    ]
    return {"name": "lab", "hosts": hosts, **kw}


def test_a_fleet_file_reads_with_defaults(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet_data()))
    fleet = load_fleet(path)
    assert [h.name for h in fleet.hosts] == ["gpu-a", "gpu-b"]
    assert fleet.pool == "specsweep-fleet" and fleet.max_attempts == 3
    assert (fleet.heartbeat_s, fleet.lost_after_s) == (30, 90)
    assert fleet.hosts[0].target.kind == "local" and fleet.hosts[1].target.kind == "ssh"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hosts": []}, "hosts"),
        ({"hosts": [{"name": "a"}, {"name": "a"}]}, "unique: a"),
        ({"lost_after_s": 40, "heartbeat_s": 40}, "must exceed heartbeat_s"),
        ({"heartbeat_s": 10}, "heartbeat_s"),
        ({"hosts": [{"name": "../x"}]}, "hosts.0.name"),
        ({"hosts": [{"name": "a", "gpu": [0]}]}, "unknown key"),
        ({"hosts": [{"name": "a", "target": {"kind": "k8s"}}]}, "not a target kind"),
    ],
)
def test_bad_fleets_are_refused_with_the_key(change, message):
    with pytest.raises(ConfigError, match="invalid fleet") as err:
        parse_fleet(fleet_data(**change))
    assert message in str(err.value)


def test_a_missing_fleet_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match="fleet file not found"):
        load_fleet(tmp_path / "nope.yaml")


def test_a_host_brings_its_target_gpus_and_port(tmp_path):
    config = parse_config(sim_config_data(tmp_path, 30000))
    config = config.model_copy(
        update={"server": config.server.model_copy(update={"env": {"A": "1"}})}
    )
    a, b = parse_fleet(fleet_data()).hosts
    on_a = config_for_host(config, a)
    assert on_a.target.name == "gpu-a" and on_a.target.kind == "local"
    assert on_a.server.port == 31000
    assert on_a.server.env == {"A": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    on_b = config_for_host(config, b)
    assert on_b.target.name == "gpu-b" and on_b.target.host == "gpu-b.lan"
    assert on_b.server.port == 30000 and on_b.server.env == {"A": "1"}
    assert config.target.name == "test-host"  # the sweep's own config is untouched


def test_a_host_that_makes_the_config_invalid_is_refused(tmp_path):
    data = sim_config_data(tmp_path, 30000)
    config = parse_config(data)
    ssh = {"kind": "ssh", "host": "10.0.0.2", "drive_from": "orchestrator"}
    host = parse_fleet({"hosts": [{"name": "far", "target": ssh}]}).hosts[0]
    with pytest.raises(ValueError, match="cannot reach"):
        config_for_host(config, host)  # the server binds 127.0.0.1 on a remote host


def test_a_flow_run_outside_a_fleet_worker_is_told_how(monkeypatch):
    monkeypatch.delenv(HOST_ENV, raising=False)
    fleet = parse_fleet(fleet_data())
    with pytest.raises(ConfigError, match="specsweep fleet worker"):
        current_host(fleet)
    monkeypatch.setenv(HOST_ENV, "gpu-z")
    with pytest.raises(ConfigError, match=r"'gpu-z' is not in fleet 'lab' \(hosts: gpu-a, gpu-b\)"):
        current_host(fleet)
    monkeypatch.setenv(HOST_ENV, "gpu-b")
    assert current_host(fleet).name == "gpu-b"


def test_a_host_whose_results_store_is_not_writable_fails_its_preflight(tmp_path):
    data = sim_config_data(tmp_path, free_port())
    blocker = tmp_path / "file"
    blocker.write_text("")
    data["results_dir"] = str(blocker / "results")  # under a file: mkdir fails, even as root
    host = parse_fleet({"hosts": [{"name": "gpu-a"}]}).hosts[0]
    with pytest.raises(HostUnavailable, match="host gpu-a failed its pre-flight check: results"):
        check_host(config_for_host(parse_config(data), host))


def test_an_unreachable_ssh_host_fails_its_preflight(tmp_path):
    data = sim_config_data(tmp_path, free_port())
    ssh = {"kind": "ssh", "host": "127.0.0.1", "port": free_port(),
           "connect_attempts": 1, "connect_timeout_s": 3, "verify_host_key": False}  # fmt: skip
    host = parse_fleet({"hosts": [{"name": "gpu-c", "target": ssh}]}).hosts[0]
    with pytest.raises(HostUnavailable, match=r"host gpu-c failed its pre-flight check: .*refused"):
        check_host(config_for_host(parse_config(data), host))


def test_real_sglang_on_a_host_without_gpus_fails_its_preflight(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on this "host"
    data = sim_config_data(tmp_path, free_port())
    data["server"] = {"model_path": "m", "port": free_port(), "python": sys.executable}
    host = parse_fleet({"hosts": [{"name": "cpu-only", "gpus": [3]}]}).hosts[0]
    with pytest.raises(HostUnavailable, match=r"no GPU \(CUDA_VISIBLE_DEVICES=3\)"):
        check_host(config_for_host(parse_config(data), host))


def _project(tmp_path: Path, hosts: list[dict]) -> tuple[Path, Path]:
    sweep, fleet = tmp_path / "sweep.yaml", tmp_path / "fleet.yaml"
    sweep.write_text(yaml.safe_dump(sim_config_data(tmp_path, free_port())))
    fleet.write_text(yaml.safe_dump({"name": "lab", "hosts": hosts}))
    return sweep, fleet


def test_a_host_failing_its_preflight_gets_no_worker(tmp_path):
    """`fleet worker` checks first: a broken host never polls, so no variant lands there."""
    ssh = {"kind": "ssh", "host": "127.0.0.1", "port": free_port(),
           "connect_attempts": 1, "connect_timeout_s": 3, "verify_host_key": False}  # fmt: skip
    sweep, fleet = _project(tmp_path, [{"name": "gpu-a"}, {"name": "gpu-c", "target": ssh}])
    result = runner.invoke(
        app, ["fleet", "worker", "-f", str(fleet), "-c", str(sweep), "--host", "gpu-c"]
    )
    assert result.exit_code == 1, result.output
    assert "host gpu-c skipped" in result.output and "refused" in result.output
    checked = runner.invoke(app, ["fleet", "check", "-f", str(fleet), "-c", str(sweep)])
    assert checked.exit_code == 1
    lines = checked.output.splitlines()
    assert any("gpu-a" in ln and "ok" in ln for ln in lines), checked.output
    assert any("gpu-c" in ln and "pre-flight" in ln for ln in lines), checked.output


def test_fleet_commands_refuse_bad_input_before_anything_starts(tmp_path):
    sweep, fleet = _project(tmp_path, [{"name": "gpu-a"}])
    unknown = runner.invoke(app, ["fleet", "worker", "-f", str(fleet), "--host", "gpu-x"])
    assert unknown.exit_code == 2 and "'gpu-x' is not in fleet 'lab'" in unknown.output
    same_pool = runner.invoke(
        app,
        ["fleet", "deploy", "-f", str(fleet), "-c", str(sweep), "--sweep-pool", "specsweep-fleet"],
    )
    assert same_pool.exit_code == 2 and "must differ" in same_pool.output
    bad_run_id = runner.invoke(
        app, ["fleet", "run", "-f", str(fleet), "-c", str(sweep), "--run-id", "../x"]
    )
    assert bad_run_id.exit_code == 2 and "run id" in bad_run_id.output
    assert not (tmp_path / "results").exists()  # nothing was written
    assert os.environ.get(HOST_ENV) is None


def test_the_example_fleet_parses_and_names_targets_after_hosts():
    fleet = load_fleet(Path(__file__).parents[3] / "examples" / "fleet.yaml")
    assert [(h.name, h.target.kind) for h in fleet.hosts] == [
        ("gpu-a", "local"), ("gpu-b", "local"), ("gpu-c", "ssh")
    ]  # fmt: skip
    assert fleet.hosts[2].target.name == "gpu-c"  # no second name to keep in step
