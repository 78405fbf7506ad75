"""The per-target concurrency slot keeps a second flow off a busy target, visibly."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from prefect import get_client
from prefect.concurrency.sync import concurrency
from prefect.variables import Variable

from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import TargetLockMissing
from specsweep.flows import lock_holder
from specsweep.flows.benchmark_variant import benchmark_variant
from specsweep.flows.target_lock import ensure_target_limit, target_lock_name
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore
from specsweep.targets.local import LocalRunner
from tests.conftest import sim_config_data

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def _own_target() -> str:
    """A target no other test (nor a rerun of this one) has a limit for: the Prefect
    harness lives for the whole session."""
    return f"lock-{uuid.uuid4().hex[:8]}"


def test_a_missing_limit_stops_the_run_and_says_how_to_create_it(tmp_path, port):
    target = _own_target()
    data = sim_config_data(tmp_path, port, target={"name": f"Host B/{target}"})
    config = parse_config(data)
    name = f"specsweep-target-host-b-{target}"
    assert target_lock_name(config) == name
    with pytest.raises(TargetLockMissing, match=r"specsweep limits create -c"):
        benchmark_variant(config, BASELINE, RunContext("no-limit", "step_sweep", "t", "x"))
    assert not (config.target.workdir / "logs").exists()  # nothing was launched
    assert ensure_target_limit(name) is True
    assert ensure_target_limit(name) is False  # idempotent


def test_a_second_flow_waits_until_the_target_is_free(tmp_path, port, caplog):
    target = _own_target()
    data = sim_config_data(tmp_path, port, load={"concurrency": [1]}, target={"name": target})
    config = parse_config(data)
    assert ensure_target_limit(target_lock_name(config)) is True
    ctx = RunContext("lock-run", "step_sweep", "t", target)
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
        assert f"target {target} is busy" in caplog.text
        assert not (config.target.workdir / "logs").exists()  # still waiting: no launch
        released = time.time()  # what proves it waited: it held the target only after this
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(result["rows"]) == 1  # type: ignore[arg-type]
    # The flow records when it began to hold the target, before kill-stale and launch.
    held = ResultsStore(config.results_dir).read_phases("lock-run")["baseline"]
    assert released <= held["held_from_unix"] <= held["held_until_unix"]
    assert LocalRunner(config.target.workdir).state.entries() == []


def test_a_flow_that_lets_go_leaves_a_released_record_that_frees_no_one(tmp_path, port):
    """The holder's record is released with the slot, by an update (a delete failed with
    "database is locked" on SQLite at every variant's end and cost a 2 s retry), and a
    released record is no proof that whoever holds the slot next is gone."""
    target = _own_target()
    data = sim_config_data(tmp_path, port, load={"concurrency": [1]}, target={"name": target})
    config = parse_config(data)
    name = target_lock_name(config)
    assert ensure_target_limit(name) is True
    rows = benchmark_variant(config, BASELINE, RunContext("let-go", "step_sweep", "t", target))
    assert len(rows) == 1
    record = Variable.get(lock_holder.variable_name(name))
    assert isinstance(record, dict) and set(record) == {"released"}, record
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(name).active_slots == 0
        with concurrency(name, occupy=1, strict=True):  # held by one that recorded nothing
            assert lock_holder.free_if_holder_gone(client, name) is None
            assert client.read_global_concurrency_limit_by_name(name).active_slots == 1
