"""Every kind of configuration error gives one clear message before anything starts.

The messages are pinned: through `parse_config` + the sweep expansion (what the flows
run first), and through `specsweep run step-sweep -c bad.yaml`, which exits 2, prints
the message and leaves no trace: no server on the port, no workdir, no results.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError
from tests.conftest import free_port, sim_config_data
from tests.integration.test_cleanup import listening

Mutation = Callable[[dict[str, Any]], Any]
SSH = {"kind": "ssh", "name": "gpu", "host": "127.0.0.1"}

# (mutation of a valid step-sweep config, the exact message)
CASES: dict[str, tuple[Mutation, str]] = {
    "unknown key": (
        lambda d: d.update(nmae="x"),
        "invalid configuration:\n  nmae: unknown key (check the spelling; see examples/*.yaml)",
    ),
    "unknown nested key": (
        lambda d: d["server"].update(prot=1),
        "invalid configuration:\n  server.prot: unknown key (check the spelling; see "
        "examples/*.yaml)",
    ),
    "unknown key of an ssh target": (
        lambda d: d.update(target={**SSH, "hots": "x"}),
        "invalid configuration:\n  target.hots: unknown key (check the spelling; see "
        "examples/*.yaml)",
    ),
    "unknown target kind": (
        lambda d: d["target"].update(kind="sssh"),
        "invalid configuration:\n  target.kind: 'sssh' is not a target kind; use local or ssh",
    ),
    "wrong type": (
        lambda d: d["server"].update(port="abc"),
        "invalid configuration:\n  server.port: Input should be a valid integer, unable to "
        "parse string as an integer",
    ),
    "wrong type for a list": (
        lambda d: d["load"].update(concurrency="eight"),
        "invalid configuration:\n  load.concurrency: Input should be a valid list",
    ),
    "wrong choice": (
        lambda d: d["server"].update(backend="vllm"),
        "invalid configuration:\n  server.backend: Input should be 'sglang' or 'simulator'",
    ),
    "port out of range": (
        lambda d: d["server"].update(port=70000),
        "invalid configuration:\n  server.port: Input should be less than or equal to 65535",
    ),
    "rate out of range": (
        lambda d: d["load"].update(max_error_rate=2),
        "invalid configuration:\n  load.max_error_rate: Input should be less than or equal to 1",
    ),
    "zero concurrency": (
        lambda d: d["load"].update(concurrency=[0, 4]),
        "invalid configuration:\n  load.concurrency.0: Input should be greater than or equal to 1",
    ),
    "repeated levels": (
        lambda d: d["load"].update(concurrency=[4, 4]),
        "invalid configuration:\n  load.concurrency: concurrency levels repeat: [4, 4]",
    ),
    "topk=1 with other draft tokens": (
        lambda d: d["step_sweep"].update(num_draft_tokens=7),
        "step_sweep num_steps=2: with topk=1 sglang forces num_draft_tokens = num_steps + 1 = "
        "3; got 7. Leave it out or set 3",
    ),
    "topk>1 without draft tokens": (
        lambda d: d["step_sweep"].update(topk=2),
        "step_sweep num_steps=2: topk=2 needs num_draft_tokens (between 2 and "
        "num_steps*topk+1 = 5)",
    ),
    "draft tree too small": (
        lambda d: d["step_sweep"].update(topk=2, num_draft_tokens=9),
        "step_sweep num_steps=2: num_draft_tokens=9 exceeds num_steps*topk+1 = 5: the draft "
        "tree cannot hold that many tokens",
    ),
    "spec v2 with topk>1": (
        lambda d: d["step_sweep"].update(topk=2, num_draft_tokens=4, spec_v2=True),
        "step_sweep num_steps=2: SGLANG_ENABLE_SPEC_V2 (the spec v2 overlap path) only "
        "supports topk=1; got topk=2",
    ),
    "EAGLE without a draft model": (
        lambda d: d["step_sweep"].update(draft_model_path=None),
        "step_sweep num_steps=2: EAGLE3 needs draft_model_path",
    ),
    "speculation without max_running_requests": (
        lambda d: d["server"].update(max_running_requests=None),
        "set server.max_running_requests: with speculation sglang silently caps it at 48 "
        "while the baseline keeps its own default, so the comparison would be unfair above 48 "
        "concurrent requests (unset for: baseline, eagle3-s2-k1-d3)",
    ),
    "owned flag in extra_args": (
        lambda d: d["server"].update(extra_args=["--port", "1"]),
        "invalid configuration:\n  server.extra_args: --port is set by specsweep from the "
        "server/variant fields; set the matching field instead of passing it in extra_args",
    ),
    "abbreviated owned flag": (
        lambda d: d["server"].update(extra_args=["--max-running=64"]),
        "invalid configuration:\n  server.extra_args: --max-running abbreviates "
        "--max-running-requests, which specsweep sets from the server/variant fields; set "
        "the matching field instead",
    ),
    "no step_sweep section": (
        lambda d: d.pop("step_sweep"),
        "a step sweep needs a step_sweep section in the configuration",
    ),
    "missing dataset": (
        lambda d: d["load"].update(dataset="/nonexistent/sharegpt.json"),
        "invalid configuration:\n  load.dataset: dataset /nonexistent/sharegpt.json: no such "
        "file on this machine",
    ),
    "missing key_file": (
        lambda d: d.update(target={**SSH, "key_file": "/nonexistent/id_ed25519"}),
        "invalid configuration:\n  target: key_file /nonexistent/id_ed25519: no such file on "
        "this machine",
    ),
    "missing known_hosts": (
        lambda d: d.update(target={**SSH, "known_hosts": "/nonexistent/known_hosts"}),
        "invalid configuration:\n  target: known_hosts /nonexistent/known_hosts: no such file "
        "on this machine",
    ),
    "orchestrator cannot reach the server": (
        lambda d: d.update(target={**SSH, "host": "10.0.0.5", "drive_from": "orchestrator"}),
        "invalid configuration:\n  (top level): target.drive_from=orchestrator, but the server "
        "listens on 127.0.0.1 of 10.0.0.5, which this machine cannot reach: set server.host to "
        "0.0.0.0 (or the host's address), or drive_from=target",
    ),
}


def _bad(tmp_path: Path, port: int, mutate: Mutation) -> dict[str, Any]:
    data = copy.deepcopy(sim_config_data(tmp_path, port))
    mutate(data)
    return data


@pytest.mark.parametrize("case", list(CASES))
def test_each_error_has_one_pinned_message(tmp_path, case):
    mutate, message = CASES[case]
    with pytest.raises(ConfigError) as info:
        sweep_variants(parse_config(_bad(tmp_path, free_port(), mutate)), "step-sweep")
    assert str(info.value) == message


def test_known_hosts_is_not_required_when_host_keys_are_not_verified(tmp_path):
    target = {**SSH, "verify_host_key": False, "known_hosts": "/nonexistent/kh"}
    config = parse_config(_bad(tmp_path, free_port(), lambda d: d.update(target=target)))
    assert config.target.verify_host_key is False
    assert str(config.target.known_hosts) == "/nonexistent/kh"  # kept, not dropped


def _nothing_started(tmp_path: Path, port: int) -> None:
    assert not listening(port)
    assert not (tmp_path / "work").exists(), "a workdir was created: something started"
    assert not (tmp_path / "results").exists(), "results were written"


runner = CliRunner()


@pytest.mark.parametrize("case", list(CASES))
def test_the_cli_exits_2_with_the_message_and_starts_nothing(tmp_path, case):
    mutate, message = CASES[case]
    port = free_port()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_bad(tmp_path, port, mutate)))
    result = runner.invoke(app, ["run", "step-sweep", "-c", str(bad)])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())  # rich wraps long lines
    assert "error:" in out and " ".join(message.split()) in out
    _nothing_started(tmp_path, port)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-c", "/nonexistent/sweep.yaml"], "config file not found: /nonexistent/sweep.yaml"),
        (["--run-id", "../../tmp/x"], "run id '../../tmp/x': use letters, digits and . _ = -"),
        (["--set", "server.port"], "--set 'server.port': expected key.path=value"),
    ],
)
def test_the_cli_refuses_bad_paths_ids_and_overrides(tmp_path, args, message):
    port = free_port()
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(sim_config_data(tmp_path, port)))
    config = [] if "-c" in args else ["-c", str(good)]
    argv = ["run", "step-sweep", *config, *args]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    _nothing_started(tmp_path, port)


def test_invalid_yaml_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("server: {model_path: m\n")
    result = runner.invoke(app, ["run", "step-sweep", "-c", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}: not valid YAML" in " ".join(result.output.split())


def test_the_installed_command_prints_the_message_on_stderr(tmp_path):
    """The real entry point, as a user runs it: exit 2, the message on stderr."""
    port = free_port()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_bad(tmp_path, port, CASES["missing dataset"][0])))
    out = subprocess.run(
        [sys.executable, "-m", "specsweep.cli", "run", "step-sweep", "-c", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "load.dataset: dataset /nonexistent/sharegpt.json: no such file" in out.stderr
    _nothing_started(tmp_path, port)
