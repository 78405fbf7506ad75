"""Secrets in server.env never reach logs, results, artifacts or reports.

A real step sweep (Prefect flow, simulator) runs with an HF token in server.env and
an API key in the sweep section's env, locally and on an SSH target; then every
output is searched for them: the Parquet files (bytes and every cell via pandas), the
server logs and launch record under the workdir, every Prefect log line, every
artifact, the report that `specsweep report` writes, and (SSH) every command line
sent to the host, payloads decoded.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import shlex
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from prefect.states import State
from typer.testing import CliRunner

from specsweep.cli import app
from specsweep.config.file import parse_config
from specsweep.flows.step_sweep import step_sweep
from specsweep.flows.target_lock import ensure_target_limit
from specsweep.targets.ssh.session import SshSession
from tests.conftest import sim_config_data
from tests.flows.api_records import run_artifacts, run_logs
from tests.flows.test_step_sweep_flow import no_server_left

pytestmark = [pytest.mark.flow, pytest.mark.slow, pytest.mark.integration]


def _tokens() -> dict[str, str]:
    return {"HF_TOKEN": f"hf_{secrets.token_hex(16)}", "MY_API_KEY": f"sk-{secrets.token_hex(16)}"}


def _sweep_data(tmp_path: Path, port: int, tokens: dict[str, str]) -> dict[str, Any]:
    data = sim_config_data(tmp_path, port)
    data["server"]["env"]["HF_TOKEN"] = tokens["HF_TOKEN"]
    data["step_sweep"]["env"] = {"MY_API_KEY": tokens["MY_API_KEY"]}
    data["load"]["concurrency"] = [2]
    return data


def _assert_nowhere(
    tokens: dict[str, str], roots: list[Path], results_dir: Path, state: State, log_dir: Path
) -> None:
    """`state`: the sweep's final state; its flow run's logs and artifacts (and its
    subflows') are searched, flushed first. `log_dir`: where this run's server logs are,
    which the launch log line names."""
    files = [p for root in roots for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix == ".log" for p in files)
    for path in files:
        data = path.read_bytes()
        for token in tokens.values():
            assert token.encode() not in data, path
    for table in ("levels", "requests", "runs"):
        frame = pd.read_parquet(results_dir / table)
        assert len(frame)
        text = frame.astype(str).to_csv()
        assert not [t for t in tokens.values() if t in text], table
    run_id = state.result()["run_id"]
    logs = run_logs(state)
    assert f"run {run_id}: 2 variants" in logs  # this run's lines, not an earlier test's
    assert f"log: {log_dir}/logs/{run_id}/baseline.log" in logs and "HF_TOKEN=***" in logs
    assert not [t for t in tokens.values() if t in logs]
    artifacts = run_artifacts(state)
    assert f"step-sweep-summary run {run_id}" in artifacts
    # as a reader sees the pages too: a long word's break opportunities taken out
    shown = artifacts.replace("`<wbr>`", "").replace("<wbr>", "")
    assert not [t for t in tokens.values() if t in artifacts or t in shown]


def _report(results_dir: Path, run_id: str, out: Path) -> list[Path]:
    result = CliRunner().invoke(
        app, ["report", run_id, "--results-dir", str(results_dir), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written, "specsweep report wrote nothing"
    return written


def test_tokens_in_env_never_leak_from_a_local_sweep(tmp_path, port):
    tokens = _tokens()
    config = parse_config(_sweep_data(tmp_path, port, tokens))
    state = step_sweep(config, return_state=True)
    assert state.is_completed(), state.message
    run_id = state.result()["run_id"]
    assert no_server_left(port)
    _report(config.results_dir, run_id, tmp_path / "report")
    roots = [tmp_path / "results", tmp_path / "work", tmp_path / "report"]
    _assert_nowhere(tokens, roots, config.results_dir, state, tmp_path / "work")


def _decoded_payloads(command: str) -> list[str]:
    """Every --payload of an agent command line, decoded from base64."""
    words = shlex.split(command)
    out = []
    for i, word in enumerate(words[:-1]):
        if word in ("--payload", "--load"):
            try:
                out.append(base64.b64decode(words[i + 1], validate=True).decode())
            except (binascii.Error, UnicodeDecodeError):
                out.append(words[i + 1])
    return out


def test_tokens_in_env_never_leak_from_an_ssh_sweep(tmp_path, port, sshd, monkeypatch):
    tokens = _tokens()
    data = _sweep_data(tmp_path, port, tokens)
    data["target"] = sshd.target(tmp_path / "remote")
    config = parse_config(data)
    ensure_target_limit("specsweep-target-ssh-test")
    commands: list[str] = []
    real_run = SshSession.run

    def spy(self, command: str, *args: Any, **kwargs: Any):
        commands.append(command)
        return real_run(self, command, *args, **kwargs)

    monkeypatch.setattr(SshSession, "run", spy)
    state = step_sweep(config, return_state=True)
    assert state.is_completed(), state.message
    assert no_server_left(port)
    # A command line is visible to every user of the host (ps); payloads are only encoded.
    assert any("kill-stale" in c for c in commands) and any("wait-ready" in c for c in commands)
    for command in commands:
        for text in [command, *_decoded_payloads(command)]:
            assert not [t for t in tokens.values() if t in text], command[:200]
    roots = [tmp_path / "results", tmp_path / "remote"]
    _assert_nowhere(tokens, roots, config.results_dir, state, tmp_path / "remote")
