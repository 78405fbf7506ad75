"""The per-target concurrency slot keeps a second flow off a busy target, visibly."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from prefect.concurrency.sync import concurrency

from flows.benchmark_variant import benchmark_variant
from flows.target_lock import ensure_target_limit, target_lock_name
from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import TargetLockMissing
from specsweep.results.rows import RunContext
from specsweep.targets.local import LocalRunner
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def test_a_missing_limit_stops_the_run_and_says_how_to_create_it(tmp_path, port):
    data = sim_config_data(tmp_path, port, target={"name": "Host B/7"})
    config = parse_config(data)
    assert target_lock_name(config) == "specsweep-target-host-b-7"
    with pytest.raises(TargetLockMissing, match=r"specsweep limits create -c"):
        benchmark_variant(config, BASELINE, RunContext("no-limit", "step_sweep", "t", "x"))
    assert not (config.target.workdir / "logs").exists()  # nothing was launched
    assert ensure_target_limit("specsweep-target-host-b-7") is True
    assert ensure_target_limit("specsweep-target-host-b-7") is False  # idempotent


def test_a_second_flow_waits_until_the_target_is_free(tmp_path, port, caplog):
    config = parse_config(sim_config_data(tmp_path, port, load={"concurrency": [1]}))
    ctx = RunContext("lock-run", "step_sweep", "t", "test-host")
    result: dict[str, object] = {}

    def second_flow() -> None:
        result["rows"] = benchmark_variant(config, BASELINE, ctx)

    caplog.set_level(logging.INFO)
    with concurrency(target_lock_name(config), occupy=1, strict=True):  # the "first flow"
        thread = threading.Thread(target=second_flow)
        thread.start()
        deadline = time.monotonic() + 30
        while "is busy" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "target test-host is busy" in caplog.text
        time.sleep(1.0)
        assert not (config.target.workdir / "logs").exists()  # still waiting: no launch
        released = time.time()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(result["rows"]) == 1  # type: ignore[arg-type]
    log = config.target.workdir / "logs" / "lock-run" / "baseline.log"
    assert log.stat().st_mtime >= released  # launched only after the slot was free
    assert LocalRunner(config.target.workdir).state.entries() == []
