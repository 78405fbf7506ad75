"""The drift calibration: short levels, repeated, that measure this run's drift.

A pass's throughput moves with its requests' yield, which the pass shows, and with the
server's and client's speed, which it does not (specsweep/results/drift.py). Before the
first level on a target, the sweep runs ``CALIBRATION_PASSES`` passes of the run's own
level size at ``CALIBRATION_CONCURRENCY`` (clamped to the run's levels) on the server it
launched first (the baseline), and as many at the run's top level when that is at least
``TOP_BAND_RATIO`` times higher: their pass-to-pass spread beyond their yields' is the
drift every later level of the run on that target adds to its interval, interpolated
between the two in log concurrency (``DriftBands``). One calibration at c=4 cannot be
right at c=16: there a simulated baseline streams 4,000-5,500 chunks per wall second, and
its passes spread 2-4x the drift c=4 measured (benchmarks/interval_coverage.py, 73% and
47% coverage); a real server's per-chunk tokenizer and detokenizer work is the same kind
of cost. Ten passes give each estimate 9 degrees of freedom: a deterministic server's
interval is the drift alone, times the t quantile (2.26 at 9 df, 1.15x the normal's; 2.57
at the 5 df of six passes, 1.31x, made the baselines' intervals 1.4-1.5x as wide as their
passes' spread on a quiet machine). Each pass adds about 0.4 s (c=4) to 0.7 s (c=16) to
the demo.

The passes have their own prompt seed (no prefix of theirs is in the server's cache when
the levels run). What is stored (``DriftBands``: a ``DriftCalibration`` per concurrency, a
JSON file beside the run's levels) is enough to re-derive the numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from specsweep.config import LoadSpec
from specsweep.loadgen.metrics import split_passes
from specsweep.loadgen.runner import LevelResult
from specsweep.results.drift import CALIBRATED, Drift, drift_from_passes, satterthwaite
from specsweep.results.intervals import pass_parts

CALIBRATION_PASSES = 10
CALIBRATION_CONCURRENCY = 4  # low enough to be cheap, above one stream's idle gaps
TOP_BAND_RATIO = 4  # the top level calibrates too when it is this many times the first's
_CALIBRATION_SEED = 104_729  # added to load.seed: prompts no level sends


def calibration_levels(load: LoadSpec) -> list[tuple[int, LoadSpec]]:
    """(concurrency, load) of each calibration, lowest first: CALIBRATION_CONCURRENCY
    within the run's levels, then the run's top level when it is at least TOP_BAND_RATIO
    times that; each the first shape's level size, CALIBRATION_PASSES passes, fixed counts
    (no target_cv / target_ci) and prompts of its own."""
    levels = load.concurrency
    low = min(max(CALIBRATION_CONCURRENCY, min(levels)), max(levels))
    bands = [low] + ([max(levels)] if max(levels) >= TOP_BAND_RATIO * low else [])
    first = load.for_shape(load.shape)
    return [
        (
            concurrency,
            first.model_copy(
                update={
                    "repeats": CALIBRATION_PASSES,
                    "target_cv": None,
                    "target_ci": None,
                    "seed": first.seed + _CALIBRATION_SEED * (k + 1),
                }
            ),
        )
        for k, concurrency in enumerate(bands)
    ]


@dataclass(frozen=True)
class DriftCalibration:
    """What one calibration measured on a target: the drift and the numbers behind it."""

    drift: float  # relative SD of a pass's throughput beyond its yield's
    df: int  # passes - 1
    variant: str  # the server it ran on
    concurrency: int
    shape: str
    requests_per_pass: int
    throughputs: list[float]  # each pass's output throughput (tok/s)
    between_cv: float  # their coefficient of variation
    yield_cv: float  # the root mean square of the passes' relative yield SDs
    measured_at: str  # ISO 8601, UTC

    @property
    def as_drift(self) -> Drift:
        return Drift(self.drift, self.df, CALIBRATED)

    @classmethod
    def from_result(
        cls, result: LevelResult, variant: str, shape: str, requests_per_pass: int
    ) -> DriftCalibration | None:
        """The calibration from its level's records; None below two usable passes."""
        parts = pass_parts(split_passes(result.records), result.metrics.concurrency)
        drift = drift_from_passes(parts)
        if not drift.measured:
            return None
        values = [p.output_throughput for p in parts]
        mean = sum(values) / len(values)
        between = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / mean
        yields = [p.variance for p in parts if math.isfinite(p.variance)]
        return cls(
            drift=drift.sd,
            df=drift.df,
            variant=variant,
            concurrency=result.metrics.concurrency,
            shape=shape,
            requests_per_pass=requests_per_pass,
            throughputs=values,
            between_cv=between,
            yield_cv=math.sqrt(sum(yields) / len(yields)) if yields else math.nan,
            measured_at=datetime.now(UTC).isoformat(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(self).items()
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DriftCalibration:
        kw = {
            k: (math.nan if v is None and k in ("between_cv", "yield_cv") else v)
            for k, v in data.items()
        }
        return cls(**kw)


@dataclass(frozen=True)
class DriftBands:
    """A run's drift calibrations on one target, by concurrency, and the drift a level at
    any concurrency uses: the calibrated one's, the variance interpolated linearly in log
    concurrency between two (its degrees of freedom by Welch-Satterthwaite), the nearest
    one's outside them."""

    points: tuple[DriftCalibration, ...]  # ascending concurrency, at least one

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("DriftBands needs at least one calibration")
        object.__setattr__(self, "points", tuple(sorted(self.points, key=lambda p: p.concurrency)))

    def drift_at(self, concurrency: int) -> Drift:
        pts = self.points
        if concurrency <= pts[0].concurrency:
            return pts[0].as_drift
        if concurrency >= pts[-1].concurrency:
            return pts[-1].as_drift
        lo, hi = next((a, b) for a, b in pairwise(pts) if concurrency <= b.concurrency)
        w = math.log(concurrency / lo.concurrency) / math.log(hi.concurrency / lo.concurrency)
        parts = [((1 - w) * lo.drift**2, lo.df), (w * hi.drift**2, hi.df)]
        variance = sum(v for v, _ in parts)
        df = satterthwaite(parts)
        df = lo.df + hi.df if not math.isfinite(df) else max(1, math.floor(df))
        return Drift(math.sqrt(variance), df, CALIBRATED)

    def to_json(self) -> dict[str, Any]:
        return {"bands": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DriftBands:
        """Also reads a single calibration, as runs stored before the bands."""
        rows = data.get("bands", [data])
        return cls(tuple(DriftCalibration.from_json(r) for r in rows))
