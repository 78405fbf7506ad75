"""The drift calibration's level (which concurrency, how many passes, its own prompts) and
what it records, against the fast stub and from hand-made passes."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime

import pytest

from specsweep.config import LoadSpec
from specsweep.loadgen.calibration import (
    CALIBRATION_PASSES,
    DriftBands,
    DriftCalibration,
    calibration_levels,
)
from specsweep.loadgen.metrics import RequestRecord, compute_level_metrics
from specsweep.loadgen.runner import LevelResult, run_level
from specsweep.loadgen.wire import drift_json, parse_drift
from specsweep.results.drift import Drift
from tests.unit.loadgen.stub_util import fast_stub


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ([1, 2, 4, 8, 16, 32, 64], [4, 64]),
        ([1, 4, 16], [4, 16]),
        ([1, 2, 8], [4]),
        ([1, 2, 16], [4, 16]),
        ([1, 2], [2]),
        ([8, 16], [8]),  # the top within 4x of the first: one calibration covers the range
        ([4], [4]),
    ],
)
def test_the_calibrations_run_at_four_streams_and_at_a_far_top_level(levels, expected):
    load = LoadSpec(concurrency=levels, target_ci=0.02, seed=3)
    got = calibration_levels(load)
    assert [c for c, _ in got] == expected
    for c, cal in got:
        assert cal.repeats == CALIBRATION_PASSES and cal.target_ci is None
        assert cal.target_cv is None
        assert cal.num_requests(c) == load.num_requests(c)  # the run's own pass size
        assert cal.seed != load.seed  # prompts no level sends: nothing of them in the cache
    assert len({cal.seed for _, cal in got}) == len(got)


def test_the_calibration_measures_the_first_shape():
    load = LoadSpec(
        shapes=[{"input_len": 64, "output_len": 16}, {"input_len": 512, "output_len": 8}]
    )
    _, cal = calibration_levels(load)[0]
    assert (cal.input_len, cal.output_len, cal.shapes) == (64, 16, [])


def _pass(k: int, seconds: float, steps: int = 8) -> list[RequestRecord]:
    """Four sequential requests of 8 tokens, one step (chunk) per token."""
    out = []
    for i in range(4):
        t0 = k * 10.0 + i * seconds
        times = tuple(t0 + seconds * (j + 1) / steps for j in range(steps))
        out.append(
            RequestRecord(
                i, t0, times[-1], times, (1,) * steps, 8, 8, "length", None, None, None, k
            )
        )
    return out


def _result(records: list[RequestRecord]) -> LevelResult:
    now = datetime.now(UTC)
    return LevelResult(compute_level_metrics(records, 1, 0.05), tuple(records), now, now)


def test_a_calibration_is_the_spread_of_its_passes_and_round_trips():
    durations = [1.00, 1.02, 0.98, 1.01, 0.99, 1.03]
    records = [r for k, d in enumerate(durations) for r in _pass(k, d)]
    cal = DriftCalibration.from_result(_result(records), "baseline", "in8-out8", 4)
    assert cal is not None and cal.df == 5
    values = [32 / (4 * d) for d in durations]
    mean = sum(values) / len(values)
    cv = math.sqrt(sum((v - mean) ** 2 for v in values) / 5) / mean
    assert cal.between_cv == pytest.approx(cv)
    assert cal.drift == pytest.approx(cv)  # a deterministic server: all of it is drift
    assert cal.yield_cv == 0.0
    assert cal.as_drift == Drift(cal.drift, 5, "calibrated")
    assert DriftCalibration.from_json(cal.to_json()) == cal


def test_one_pass_calibrates_nothing():
    assert DriftCalibration.from_result(_result(_pass(0, 1.0)), "baseline", "x", 4) is None


def test_the_drift_travels_to_a_remote_load_generator():
    drift = Drift(0.0123, 7, "calibrated")
    assert parse_drift(drift_json(drift)) == drift
    with pytest.raises(ValueError, match="not a drift"):
        parse_drift('{"sd": 0.01}')


def test_a_calibration_level_against_the_stub_runs_its_passes():
    load = LoadSpec(concurrency=[1, 2, 4], requests_per_stream=2, output_len=4)
    [(c, cal)] = calibration_levels(load)

    async def body() -> LevelResult:
        async with fast_stub() as url:
            return await run_level(url, c, cal)

    result = asyncio.run(body())
    assert result.metrics.repeats == CALIBRATION_PASSES
    assert {r.repeat for r in result.records} == set(range(CALIBRATION_PASSES))
    got = DriftCalibration.from_result(result, "baseline", cal.shape.label, cal.num_requests(c))
    assert got is not None and got.concurrency == 4 and len(got.throughputs) == CALIBRATION_PASSES


def _cal(concurrency: int, drift: float, df: int = 9) -> DriftCalibration:
    return DriftCalibration(
        drift, df, "baseline", concurrency, "in8-out8", 16, [1.0] * (df + 1), drift, 0.0, "t"
    )


def test_a_level_between_two_calibrations_takes_their_drift_interpolated_in_log_c():
    bands = DriftBands((_cal(16, 0.004), _cal(4, 0.001)))  # any order in, sorted
    assert [p.concurrency for p in bands.points] == [4, 16]
    assert bands.drift_at(1) == Drift(0.001, 9, "calibrated")  # below: the nearest
    assert bands.drift_at(4) == Drift(0.001, 9, "calibrated")
    assert bands.drift_at(16) == Drift(0.004, 9, "calibrated")
    assert bands.drift_at(64) == Drift(0.004, 9, "calibrated")  # above: the nearest
    mid = bands.drift_at(8)  # halfway in log c: half of each variance
    assert mid.sd == pytest.approx(math.sqrt((0.001**2 + 0.004**2) / 2))
    v1, v2 = 0.5 * 0.001**2, 0.5 * 0.004**2  # Welch-Satterthwaite
    assert mid.df == math.floor((v1 + v2) ** 2 / (v1 * v1 / 9 + v2 * v2 / 9))
    assert 9 <= mid.df <= 18 and mid.source == "calibrated"


def test_two_zero_drifts_interpolate_to_zero_with_their_pooled_freedom():
    assert DriftBands((_cal(4, 0.0), _cal(32, 0.0))).drift_at(8) == Drift(0.0, 18, "calibrated")


def test_bands_round_trip_and_read_a_single_calibration_stored_before_them():
    bands = DriftBands((_cal(4, 0.001), _cal(16, 0.004)))
    assert DriftBands.from_json(bands.to_json()) == bands
    old = _cal(4, 0.002).to_json()  # a run stored by an earlier specsweep
    assert DriftBands.from_json(old) == DriftBands((_cal(4, 0.002),))
    with pytest.raises(ValueError, match="at least one"):
        DriftBands(())
