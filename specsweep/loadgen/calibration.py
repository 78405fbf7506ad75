"""The drift calibration: one short level, repeated, that measures this run's drift.

A pass's throughput moves with its requests' yield, which the pass shows, and with the
server's and client's speed, which it does not (specsweep/results/drift.py). Before the
first level on a target, the sweep runs ``CALIBRATION_PASSES`` passes of the run's own
level size at ``CALIBRATION_CONCURRENCY`` (clamped to the run's levels) on the server it
launched first (the baseline): their pass-to-pass spread beyond their yields' is the
drift every later level of the run on that target adds to its interval. Ten passes
give the estimate 9 degrees of freedom: a deterministic server's interval is the drift
alone, times the t quantile (2.26 at 9 df, 1.15x the normal's; 2.57 at the 5 df of six
passes, 1.31x, made the baselines' intervals 1.4-1.5x as wide as their passes' spread on
a quiet machine, benchmarks/interval_coverage.py). Each pass adds about 0.4 s to the
demo.

The passes have their own prompt seed (no prefix of theirs is in the server's cache when
the levels run). What is stored (``DriftCalibration``, a JSON file beside the run's
levels) is enough to re-derive the number.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from specsweep.config import LoadSpec
from specsweep.loadgen.metrics import split_passes
from specsweep.loadgen.runner import LevelResult
from specsweep.results.drift import CALIBRATED, Drift, drift_from_passes
from specsweep.results.intervals import pass_parts

CALIBRATION_PASSES = 10
CALIBRATION_CONCURRENCY = 4  # low enough to be cheap, above one stream's idle gaps
_CALIBRATION_SEED = 104_729  # added to load.seed: prompts no level sends


def calibration_level(load: LoadSpec) -> tuple[int, LoadSpec]:
    """(concurrency, load) of the calibration: the first shape's level size at
    CALIBRATION_CONCURRENCY within the run's levels, CALIBRATION_PASSES passes, fixed
    counts (no target_cv / target_ci)."""
    levels = load.concurrency
    concurrency = min(max(CALIBRATION_CONCURRENCY, min(levels)), max(levels))
    first = load.for_shape(load.shape)
    return concurrency, first.model_copy(
        update={
            "repeats": CALIBRATION_PASSES,
            "target_cv": None,
            "target_ci": None,
            "seed": first.seed + _CALIBRATION_SEED,
        }
    )


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
