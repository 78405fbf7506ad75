"""VariantServer's drift calibration: the first ready server of a run measures it once per
target, stores it, and every level of every later server of the run uses it (no server is
started here: a host that answers levels from hand-made passes stands in)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.loadgen.calibration import CALIBRATION_PASSES
from specsweep.loadgen.metrics import RequestRecord, compute_level_metrics
from specsweep.loadgen.runner import LevelResult
from specsweep.pipeline import ServerState, VariantServer
from specsweep.results.drift import Drift
from specsweep.results.rows import RunContext
from specsweep.targets.server_facts import ServerFacts
from tests.conftest import sim_config_data


class LevelHost:
    """Answers run_level with `passes` passes of four sequential 8-token requests, the k-th
    pass lasting durations[k % len] seconds per request; records what it was asked."""

    def __init__(self, durations: list[float], ok: bool = True) -> None:
        self.durations = durations
        self.ok = ok
        self.calls: list[dict[str, Any]] = []

    def run_level(self, server, concurrency, load, on_progress=None, drift=None) -> LevelResult:
        self.calls.append({"concurrency": concurrency, "repeats": load.repeats, "drift": drift})
        records = []
        for k in range(load.repeats):
            d = self.durations[k % len(self.durations)]
            for i in range(4):
                t0 = 10.0 * k + i * d
                times = tuple(t0 + d * (j + 1) / 8 for j in range(8))
                error = None if self.ok else "HTTP 500: down"
                records.append(
                    RequestRecord(
                        i, t0, times[-1], times, (1,) * 8, 8, 8, "length", None, None, error, k
                    )
                )
        now = datetime.now(UTC)
        metrics = compute_level_metrics(records, concurrency, 0.05, drift)
        return LevelResult(metrics, tuple(records), now, now, perf_origin=0.0)


def _servers(tmp_path, host: LevelHost, **load: Any) -> tuple[VariantServer, VariantServer]:
    """The run's baseline and its speculative variant, both on `host`, ready."""
    config = parse_config(
        sim_config_data(
            tmp_path, 1, load={"concurrency": [1, 4, 16], "calibrate_drift": True, **load}
        )
    )
    ctx = RunContext("r1", "step_sweep", "test", "test-host")
    out = []
    for variant in sweep_variants(config):
        server = VariantServer.for_variant(config, variant, ctx)
        server.host = host  # type: ignore[assignment]
        server.state = ServerState.READY
        server.facts = ServerFacts("0.0-sim", True)
        out.append(server)
    return out[0], out[1]


def test_the_first_server_calibrates_and_every_later_level_uses_it(tmp_path):
    host = LevelHost([1.00, 1.02, 0.98, 1.01])
    baseline, spec = _servers(tmp_path, host)
    assert baseline.needs_calibration and spec.needs_calibration
    bands = baseline.calibrate_drift()
    assert bands is not None and [p.concurrency for p in bands.points] == [4, 16]
    low, top = bands.points
    assert low.df == CALIBRATION_PASSES - 1 and low.drift > 0.005
    assert host.calls[:2] == [
        {"concurrency": 4, "repeats": CALIBRATION_PASSES, "drift": None},
        {"concurrency": 16, "repeats": CALIBRATION_PASSES, "drift": None},
    ]
    assert "calibration_s" in baseline.phases.seconds
    row = baseline.benchmark_level(1)
    assert host.calls[-1]["drift"] == Drift(low.drift, CALIBRATION_PASSES - 1, "calibrated")
    assert row["throughput_drift"] == low.drift and row["throughput_drift_source"] == "calibrated"
    spec.calibration = bands  # as the next variant reads it (below)
    spec.benchmark_level(16)
    assert host.calls[-1]["drift"] == top.as_drift
    # a server built later in the run (the next variant, or a resumed run) reads it back
    later = VariantServer.for_variant(_config(tmp_path), spec.variant, spec.ctx)
    assert not later.needs_calibration and later.calibration == bands


def test_a_calibration_that_fails_at_one_band_leaves_the_other(tmp_path, caplog):
    host = LevelHost([1.00, 1.02, 0.98, 1.01])
    real = host.run_level

    def no_top(server, concurrency, load, on_progress=None, drift=None):
        if concurrency == 16 and drift is None:
            raise ConnectionError("refused")
        return real(server, concurrency, load, on_progress, drift)

    host.run_level = no_top  # type: ignore[method-assign]
    baseline, _ = _servers(tmp_path, host)
    bands = baseline.calibrate_drift()
    assert bands is not None and [p.concurrency for p in bands.points] == [4]
    assert "drift calibration at c=16 failed (ConnectionError: refused)" in caplog.text
    assert bands.drift_at(16) == bands.points[0].as_drift  # the one measured serves all
    assert baseline.needs_calibration  # the next server tries c=16 again, c=4 is kept
    host.run_level = real  # type: ignore[method-assign]
    calls = len(host.calls)
    again = baseline.calibrate_drift()
    assert again is not None and [p.concurrency for p in again.points] == [4, 16]
    assert [c["concurrency"] for c in host.calls[calls:]] == [16]
    assert not baseline.needs_calibration


def test_a_server_whose_levels_need_more_bands_adds_them_to_the_stored_ones(tmp_path):
    """A fleet host's calibration run measures level 1 alone (its drift at c=1); the
    host's full baseline in the same run then adds c=4 and c=16, and keeps c=1."""
    host = LevelHost([1.00, 1.02, 0.98, 1.01])
    narrow, _ = _servers(tmp_path, host, concurrency=[1])
    first = narrow.calibrate_drift()
    assert first is not None and [p.concurrency for p in first.points] == [1]
    wide, _ = _servers(tmp_path, host)  # levels 1, 4, 16; reads the stored c=1
    assert wide.calibration == first and wide.needs_calibration
    calls = len(host.calls)
    bands = wide.calibrate_drift()
    assert bands is not None and [p.concurrency for p in bands.points] == [1, 4, 16]
    assert [c["concurrency"] for c in host.calls[calls:]] == [4, 16]
    assert bands.points[0] == first.points[0]
    assert wide.drift_at(1) == first.points[0].as_drift


def _config(tmp_path):
    return parse_config(
        sim_config_data(tmp_path, 1, load={"concurrency": [1, 4, 16], "calibrate_drift": True})
    )


def test_a_failed_calibration_leaves_the_levels_on_the_assumed_floor(tmp_path, caplog):
    host = LevelHost([1.0], ok=False)
    baseline, spec = _servers(tmp_path, host)
    assert baseline.calibrate_drift() is None
    assert "drift calibration at c=4 failed" in caplog.text
    assert baseline.needs_calibration and spec.needs_calibration  # the next server tries
    assert baseline.store.read_drift("r1", "test-host") is None


def test_a_calibration_that_raises_does_not_end_the_variant(tmp_path, caplog):
    host = LevelHost([1.0])

    def unreachable(*args, **kwargs):
        raise ConnectionError("refused")

    host.run_level = unreachable  # type: ignore[method-assign]
    baseline, _ = _servers(tmp_path, host)
    assert baseline.calibrate_drift() is None
    assert "ConnectionError: refused" in caplog.text and baseline.needs_calibration


def test_a_load_that_skips_the_calibration_never_needs_one(tmp_path):
    baseline, _ = _servers(tmp_path, LevelHost([1.0]), calibrate_drift=False)
    assert not baseline.needs_calibration
    row = baseline.benchmark_level(4)
    assert row["throughput_drift"] is None and row["throughput_drift_source"] == "assumed"


def test_calibrating_needs_a_ready_server(tmp_path):
    baseline, _ = _servers(tmp_path, LevelHost([1.0]))
    baseline.state = ServerState.LAUNCHED
    with pytest.raises(RuntimeError, match="calibrate-drift needs the server ready"):
        baseline.calibrate_drift()
