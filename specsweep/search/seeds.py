"""Where an adaptive search starts, and how `specsweep plan` describes it (no pandas:
the CLI's plan command loads this)."""

from __future__ import annotations

from specsweep.config import SearchSpec, Variant


def seeds(candidates: list[Variant]) -> list[Variant]:
    """The baseline, then the fewest-step and most-step chain of the narrowest static
    tree family (anchors of the cost fit; the longest also measures acceptance deep)."""
    static = [
        v
        for v in candidates
        if not v.is_baseline and not v.is_adaptive and v.resolved_num_steps is not None
    ]
    out = [v for v in candidates if v.is_baseline][:1]
    if not static:
        return out
    narrow = min(v.resolved_topk or 1 for v in static)
    family = [v for v in static if (v.resolved_topk or 1) == narrow]
    shortest = min(family, key=lambda v: v.resolved_num_steps or 0)
    longest = max(family, key=lambda v: v.resolved_num_steps or 0)
    return out + [v for v in (shortest, longest) if v not in out][: 2 if longest != shortest else 1]


def search_plan_text(spec: SearchSpec, candidates: list[Variant]) -> str:
    """What `specsweep plan` says about an adaptive search before anything runs."""
    first = ", ".join(v.label for v in seeds(candidates))
    budget = [
        f"max_launches {spec.max_launches}" if spec.max_launches else "",
        f"max_server_minutes {spec.max_server_minutes:g}" if spec.max_server_minutes else "",
    ]
    bound = ", ".join(b for b in budget if b) or "no budget: it stops when nothing can win"
    skips = (
        f"; a variant's higher levels are skipped once it trails the best and the baseline by "
        f"more than {spec.margin:.0%} at two levels, falling"
        + (" (the top level is still measured)" if spec.confirm_top else "")
        if spec.skip_levels
        else ""
    )
    return (
        f"search: adaptive over these {len(candidates)} variants: {first} first, then the "
        f"one whose predicted upper bound leads the best measured by the most (a clear lead: "
        f"more than {spec.margin:.0%} beyond the noise); {bound}{skips}"
    )
