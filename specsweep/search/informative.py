"""Whether the model's prediction intervals could rule anything out.

"53 of 57 levels inside the predicted 95% interval" reads as a calibrated model, but a
model that knows nothing (no acceptance data, say) is calibrated too: its intervals are
as wide as the question. Speculation moves throughput by tens of percent either way, so
an interval wider than that cannot tell a winning variant from a losing one.
"""

from __future__ import annotations

import pandas as pd

# ±50%: from half the prediction to one and a half times it, the range from "speculation
# costs a third of the throughput" to "it wins by half": no variant can be ruled out.
TOO_WIDE = 0.5


def median_half_width(predicted: pd.Series, lo: pd.Series, hi: pd.Series) -> float:
    """The median relative half-width, (hi - lo) / 2 / predicted, of the usable rows."""
    half = ((hi - lo) / 2.0 / predicted)[(predicted > 0) & lo.notna() & hi.notna()]
    return float(half.median()) if len(half) else float("nan")


def uninformative(predicted: pd.Series, lo: pd.Series, hi: pd.Series) -> str | None:
    """A warning when the intervals are too wide to rule anything out; None otherwise."""
    half = median_half_width(predicted, lo, hi)
    if not half > TOO_WIDE:  # NaN (no interval) included
        return None
    return (
        f"the model's 95% intervals are ±{half:.0%} wide (median): too wide to rule any "
        "variant out, so measurements falling inside them say nothing about the model"
    )
