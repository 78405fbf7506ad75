"""The one tie rule, judged per level: which measured config runs at one concurrency.

Every view of the answer (the best-per-level table, the speculation policy, the adaptive
tier export, the headline) decides a level with `judge_level`, and nothing else:

- a difference is **real** when the 95% interval of the ratio of the two throughputs lies
  wholly above ``1 + margin`` (levels without an interval: the ratio itself);
- the best (highest measured) config **ties** every config it is not really better than;
  among the tied, the **simplest** runs: no speculation, then fewer draft steps, a
  narrower tree, fewer draft tokens (levels.simplicity_key);
- the level's status says how sure that choice is: ``clear`` (nothing ties the best),
  ``tie`` (every config that ties the choice measured within the margin of it: they tie,
  run the simplest), or ``open`` (a more complex config measured more than the margin
  above the choice, but its interval reaches below the margin: it may be worth its
  complexity, and only more measurement can say: the decision names that cell).

A clear gain at one level is never given up because other levels dilute it: levels are
judged one by one; a traffic mix only weighs what a deployable config is worth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specsweep.results.intervals import Interval, ratio

LevelStatus = Literal["clear", "tie", "open"]
UNKNOWN = Interval(math.nan)  # immutable: safe as a default


@dataclass(frozen=True)
class Option:
    """One measured config at one level: its name, its throughput with the interval, and
    its place in the simplicity order (lower runs first among ties)."""

    name: str
    throughput: Interval
    simplicity: tuple


@dataclass(frozen=True)
class LevelJudgment:
    """How one level is decided among its measured options."""

    concurrency: int
    choice: str  # what runs here
    best: str  # the highest measured
    status: LevelStatus
    margin: float
    tied: tuple[str, ...] = ()  # options the best is not really better than (not the best)
    rival: str | None = None  # open: the config that may still beat the choice
    rival_ratio: Interval = UNKNOWN  # rival / choice
    runner_up: str | None = None  # the second highest measured
    lead: Interval = UNKNOWN  # best / runner-up

    @property
    def decided(self) -> bool:
        return self.status != "open"

    def width(self) -> float:
        """The rival's ratio interval's full width relative to its value (open levels)."""
        r = self.rival_ratio
        return (r.hi - r.lo) / r.value if r.known and r.value else math.nan

    def sentence(self, label: str = "") -> str:
        """One statement of the level, e.g. ``s1 and s2 tie at c=2 within 1%: run s1``."""
        at = f"c={self.concurrency}" + (f" ({label})" if label else "")
        if self.status == "clear":
            if self.runner_up is None:
                return f"{self.choice} is the only config measured at {at}"
            return f"{self.choice} wins at {at}: {_lead(self.lead)} over {self.runner_up}"
        if self.status == "tie" and self.choice == self.best:
            others = ", ".join(self.tied)
            return (
                f"{self.choice} is best at {at} and the simplest; {others} "
                f"{'is' if len(self.tied) == 1 else 'are'} within its noise: run {self.choice}"
            )
        if self.status == "tie":
            others = ", ".join(t for t in (self.best, *self.tied) if t != self.choice)
            return (
                f"{self.choice} and {others} tie at {at} within {self.margin:.0%}: "
                f"run {self.choice}"
            )
        return (
            f"at {at} {self.rival} leads {self.choice} {_lead(self.rival_ratio)}: more than "
            f"the {self.margin:.0%} margin, but the interval reaches below it; measure more "
            f"(interval width {self.width():.1%})"
        )


def _lead(r: Interval) -> str:
    text = f"{r.value - 1:+.1%}"
    if r.known and math.isfinite(r.hi):
        text += f" (95%: {r.lo - 1:+.1%} to {r.hi - 1:+.1%})"
    return text


def really_better(r: Interval, margin: float) -> bool:
    """The rule's one test: the ratio's 95% interval lies wholly above 1 + margin."""
    return (r.lo if r.known else r.value) > 1.0 + margin


def judge_level(concurrency: int, options: Sequence[Option], margin: float) -> LevelJudgment:
    """Decide one level (see the module docstring); options need not be sorted."""
    if not options:
        raise ValueError(f"c={concurrency}: no option measured")
    ranked = sorted(options, key=lambda o: (-o.throughput.value, o.simplicity))
    best = ranked[0]
    tied = [
        o for o in ranked[1:] if not really_better(ratio(best.throughput, o.throughput), margin)
    ]
    choice = min([best, *tied], key=lambda o: o.simplicity)
    runner = ranked[1] if len(ranked) > 1 else None
    common = {
        "concurrency": concurrency,
        "choice": choice.name,
        "best": best.name,
        "margin": margin,
        "tied": tuple(o.name for o in tied),
        "runner_up": runner.name if runner else None,
        "lead": ratio(best.throughput, runner.throughput) if runner else UNKNOWN,
    }
    if not tied:
        return LevelJudgment(status="clear", **common)
    # the most threatening more complex option: the highest measured one over the choice
    rivals = [o for o in (best, *tied) if o is not choice]
    top = max(rivals, key=lambda o: o.throughput.value)
    r = ratio(top.throughput, choice.throughput)
    if r.value > 1.0 + margin:
        return LevelJudgment(status="open", rival=top.name, rival_ratio=r, **common)
    return LevelJudgment(status="tie", rival=top.name, rival_ratio=r, **common)
