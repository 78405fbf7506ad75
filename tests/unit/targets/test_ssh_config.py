"""SSH target configuration and the JSON the remote agent speaks."""

from __future__ import annotations

import base64
import json

import pytest

from specsweep.config.file import parse_config
from specsweep.errors import ConfigError, ServerDiedError, StaleProcessError
from specsweep.targets import agent, wire
from specsweep.targets.cleanup import CleanupReport
from specsweep.targets.process import KillReport
from specsweep.targets.ssh.errors import rebuild_error


def _config(target: dict, **server: object):
    return parse_config(
        {"target": target, "server": {"model_path": "m", **server}, "variants": [{}]}
    )


def test_target_without_kind_is_local_and_ssh_needs_a_host():
    assert _config({"workdir": "w"}).target.kind == "local"
    with pytest.raises(ConfigError, match="host"):
        _config({"kind": "ssh", "name": "gpu-a"})
    t = _config({"kind": "ssh", "name": "gpu-a", "host": "gpu-a.lan", "user": "me"}).target
    assert t.verify_host_key and t.port == 22 and t.drive_from == "target"
    assert t.address == "me@gpu-a.lan:22"


def test_one_key_source_only():
    with pytest.raises(ConfigError, match="key_file or key_secret"):
        _config({"kind": "ssh", "name": "a", "host": "h", "key_file": "k", "key_secret": "s"})


def test_orchestrator_mode_needs_a_reachable_server_address():
    target = {"kind": "ssh", "name": "a", "host": "gpu-a.lan", "drive_from": "orchestrator"}
    with pytest.raises(ConfigError, match=r"set server\.host to 0\.0\.0\.0"):
        _config(target)
    assert _config(target, host="0.0.0.0").server.base_url == "http://127.0.0.1:30000"


def test_cleanup_report_round_trips_with_int_gpu_keys():
    report = CleanupReport(
        killed=[KillReport(7, [7, 8], [8], 1.5)],
        spared=["pid 9: foreign"],
        gpus=[0, 1],
        gpu_checked=True,
        memory_before={0: 80000, 1: 512},
        memory_after={0: 300},
        memory_limit={0: 1324},
        release_s=0.4,
        timeline=[(0.1, {0: 40000}), (0.4, {0: 300})],
    )
    back = wire.cleanup_from_json(json.loads(json.dumps(wire.cleanup_to_json(report))))
    assert back == report and back.killed_pids == [7, 8]


def test_remote_errors_come_back_as_engine_errors():
    died = ServerDiedError("server process exited after 1.0s ", ["CUDA out of memory"])
    back = rebuild_error(json.loads(json.dumps(agent.error_event(died))), "gpu-a")
    assert isinstance(back, ServerDiedError) and back.log_tail == ["CUDA out of memory"]
    assert not back.transient and "gpu-a" in str(back)
    stale = rebuild_error({"kind": "GpuMemoryNotReleased", "message": "still 70 GiB"}, "gpu-a")
    assert isinstance(stale, StaleProcessError)


def test_agent_rejects_a_malformed_request(capsys):
    bad = base64.b64encode(b"[1, 2]").decode()
    assert agent.main(["tail", "--payload", bad]) == agent.EXIT_BAD_REQUEST
    event = json.loads(capsys.readouterr().out)
    assert event["event"] == "error" and "JSON object" in event["message"]


def test_the_recorded_command_is_the_one_the_ssh_host_runs():
    from specsweep.config.command import command_for
    from specsweep.config.plan import BASELINE
    from specsweep.results.rows import variant_columns

    target = {"kind": "ssh", "name": "a", "host": "h", "python": "/opt/sglang/bin/python"}
    config = _config({**target, "verify_host_key": False}, backend="simulator")
    cmd = command_for(config, BASELINE)
    assert cmd.argv[0] == "/opt/sglang/bin/python"
    columns = variant_columns(config.server, BASELINE, cmd)
    assert columns["server_command"].startswith("/opt/sglang/bin/python -m specsweep.sim")
