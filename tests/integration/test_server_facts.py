"""What a GPU host says about itself: GPU name, count, driver (nvidia-smi there)."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from specsweep.config import ServerSpec
from specsweep.sim.gpu_inventory import Inventory
from specsweep.sim.nvidia_smi import BIN_DIR
from specsweep.targets.server_facts import server_facts
from tests.conftest import free_port

pytestmark = pytest.mark.integration


def test_real_server_facts_come_from_the_hosts_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_STATE", str(tmp_path / "gpus"))
    monkeypatch.setenv("SPECSWEEP_SIM_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}")
    Inventory(tmp_path / "gpus").ensure("NVIDIA H200", 2, 143771)
    facts = server_facts(ServerSpec(model_path="m", port=free_port()))  # nothing listens
    assert (facts.gpu_name, facts.gpu_count, facts.simulated) == ("NVIDIA H200", 2, False)
    assert facts.driver_version and facts.driver_version[0].isdigit()
    assert facts.gpu_host == socket.gethostname() and facts.sglang_version is None
    uuids = [g.uuid for g in Inventory(tmp_path / "gpus").gpus()]
    assert facts.gpu_uuids == ",".join(uuids) and len(set(uuids)) == 2


def test_gpu_identity_is_the_servers_gpus_only(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_SIM_GPU_STATE", str(tmp_path / "gpus"))
    monkeypatch.setenv("SPECSWEEP_SIM_PYTHON", sys.executable)
    monkeypatch.setenv("PATH", f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}")
    Inventory(tmp_path / "gpus").ensure("NVIDIA H200", 4, 143771)
    server = ServerSpec(model_path="m", port=free_port(), env={"CUDA_VISIBLE_DEVICES": "1,3"})
    facts = server_facts(server)
    uuids = [g.uuid for g in Inventory(tmp_path / "gpus").gpus()]
    assert facts.gpu_count == 2 and facts.gpu_uuids == f"{uuids[1]},{uuids[3]}"


def test_no_nvidia_smi_means_unknown_not_wrong(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    facts = server_facts(ServerSpec(model_path="m", port=free_port()))
    assert (facts.gpu_name, facts.gpu_count, facts.driver_version, facts.gpu_uuids) == (None,) * 4
