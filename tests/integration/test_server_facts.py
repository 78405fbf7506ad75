"""What a GPU host says about itself: GPU name, count, driver (nvidia-smi there)."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from specsweep.config import ServerSpec
from specsweep.server_facts import server_facts
from specsweep.sim.gpu_inventory import Inventory
from specsweep.sim.nvidia_smi import BIN_DIR
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


def test_no_nvidia_smi_means_unknown_not_wrong(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    facts = server_facts(ServerSpec(model_path="m", port=free_port()))
    assert (facts.gpu_name, facts.gpu_count, facts.driver_version) == (None, None, None)
