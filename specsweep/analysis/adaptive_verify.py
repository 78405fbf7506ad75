"""Verification: does an adaptive variant deliver the per-level best it was built for?

An adaptive variant with its own tiers (``adaptive_config`` set) is judged per measured
level c against the *reachable best*: what a tier config can do at c.

- intended steps: c routed through the variant's tiers as sglang does (padded to a
  captured CUDA-graph size, then the closest key at or below; analysis/adaptive_export);
- tiers whose candidates are all > 0, or mix 0 with steps: the best static chain (topk 1,
  same algorithm, draft model and spec v2 as the variant when the run has one) at c;
- when the run measured the engine's steps 0 (a variant whose every tier is [0], of the
  same family): the better of the best chain and that, at every level;
- otherwise, a tier [0]: the variant itself, when it ran steps 0 at least ``min_share_intended`` of
  the time (nothing else is reachable; its gap to a server without speculation is the
  engine's cost of steps 0 inside the speculative worker, reported apart, not a failure);
  otherwise the best static variant at c.

A level is ok at ``throughput >= (1 - max(tolerance, 2 sigma)) x reachable`` (sigma of the
ratio from the repeats, when both were repeated: a gap inside the noise is no evidence,
and the export resolves near-ties within it to fewer steps on purpose); a short one gets its
likely cause, from the measured step shares (``adaptive_steps_share``): off the intended
tier (a), the EMA still probing between candidates (b), or ran as intended (c: the
runtime's own cost or noise). Every number is measured; nothing is predicted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from specsweep.analysis.adaptive_export import (
    chain_mask,
    decode_cuda_graph_batch_sizes,
    levels_text,
    pad_batch,
    pinned_zero_mask,
    route,
    row_cv,
    run_max_bs,
)
from specsweep.analysis.levels import adaptive_mask, ok_levels
from specsweep.config.adaptive import DEFAULT_TIERS
from specsweep.results.rows import parse_shares

RAN = 0.01  # a step count "ran" when it holds at least 1% of the level's time
NEGLIGIBLE = 0.01  # a steps-0 overhead below 1% is called negligible


def parse_tiers(config: str) -> dict[int, list[int]]:
    """Batch-size key -> sorted candidate steps, from a recorded adaptive_config."""
    raw = json.loads(config)
    return {int(k): sorted(set(v["candidate_steps"])) for k, v in raw.items() if k.isdigit()}


def _shares_text(shares: dict[int, float], steps: list[int] | None = None) -> str:
    keep = sorted((s for s in shares if steps is None or s in steps), key=lambda s: -shares[s])
    return " and ".join(f"{s} for {shares[s]:.0%}" for s in keep if shares[s] >= RAN)


def _algo(value: object) -> str:
    text = str(value or "").upper()
    return "EAGLE" if text == "NEXTN" else text


@dataclass(frozen=True, eq=False)
class Verification:
    """One adaptive variant against the per-level best. `levels` columns, one row per level:

    concurrency, throughput; best_static_variant/_throughput (any non-adaptive variant,
    baseline included); best_chain_variant/_throughput (static topk-1 chain);
    baseline_throughput; default_throughput (sglang's default tiers, NaN unmeasured);
    share_of_best_static, share_of_default, share_of_baseline; tier_key, intended_steps
    (list); steps_share (dict step -> share, None: no trace); share_intended (NaN: no
    trace); reachable_source, reachable_throughput, share_of_reachable; noise (2-sigma
    relative spread of that share from the repeats, NaN unknown); ok; cause ("off_tier",
    "probing", "as_intended", "no_trace" or None); reason (the text); steps0_cost (1 -
    throughput / baseline where the tier is [0] and it ran so, else NaN).
    """

    variant: str
    tiers: dict[int, list[int]]
    max_bs: int
    levels: pd.DataFrame = field(repr=False)
    tolerance: float
    overhead: str | None  # the steps-0 statement, None when no level has tier [0]
    notes: tuple[str, ...] = ()

    @property
    def short(self) -> list[int]:
        return [int(c) for c in self.levels.loc[~self.levels["ok"], "concurrency"]]

    @property
    def delivers(self) -> bool:
        return not self.short

    @property
    def verdict(self) -> str:
        return (
            "delivers"
            if self.delivers
            else "falls short at " + ", ".join(f"c={c}" for c in self.short)
        )

    def headline(self) -> str:
        lv = [int(c) for c in self.levels["concurrency"]]
        if self.delivers:
            lo, hi = self.levels["share_of_reachable"].agg(["min", "max"])
            span = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"
            return (
                f"{self.variant} delivers: {span} of the best tier config at every level "
                f"({levels_text(lv)})"
            )
        bad = self.levels[~self.levels["ok"]]
        parts = [
            f"c={r.concurrency} ({r.share_of_reachable:.2f}): {r.reason}" for r in bad.itertuples()
        ]
        return f"{self.variant} falls short at " + "; ".join(parts)

    def describe(self) -> list[str]:
        tiers = " ".join(f"{k}:[{','.join(map(str, v))}]" for k, v in sorted(self.tiers.items()))
        lines = [self.headline(), f"tiers {tiers} (max_bs {self.max_bs})"]
        for r in self.levels.itertuples():
            reach = f"{r.share_of_reachable:.2f} of {r.reachable_source} "
            reach += f"({r.reachable_throughput:,.0f})"
            if r.reachable_source.startswith("itself"):
                reach = "its own reachable best (a tier [0] can do nothing else)"
            text = (
                f"c={r.concurrency}: {r.throughput:,.0f} tok/s, {reach}, "
                f"{r.share_of_best_static:.2f} of the best static ({r.best_static_variant})"
            )
            if not math.isnan(r.share_of_default):
                text += f", {r.share_of_default:.2f} of sglang's default tiers"
            text += f", {r.share_of_baseline:.2f} of the baseline; tier {r.tier_key} "
            text += f"[{','.join(map(str, r.intended_steps))}]"
            ran = _shares_text(r.steps_share) if r.steps_share is not None else ""
            text += f", ran steps {ran}" if ran else ", no step trace"
            lines.append(text + (" - ok" if r.ok else f" - SHORT: {r.reason}"))
        if self.overhead:
            lines.append(self.overhead)
        return lines + list(self.notes)


def _table(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.pivot_table(index="concurrency", columns="variant", values="output_throughput")


def _best(table: pd.DataFrame, c: int) -> tuple[str | None, float]:
    if c not in table.index or table.loc[c].isna().all():
        return None, math.nan
    row = table.loc[c]
    return str(row.idxmax()), float(row.max())


def _reference(ok: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, str | None]:
    """Static (non-adaptive) rows, their throughput table, and the baseline label."""
    static = ok[~adaptive_mask(ok)]
    base = static.loc[static["is_baseline"].astype(bool), "variant"]
    return (
        static,
        _table(static),
        _table(static[chain_mask(static)]),
        (str(base.iloc[0]) if len(base) else None),
    )


def default_tiers_reference(levels: pd.DataFrame) -> pd.DataFrame:
    """sglang's default-tier variants (adaptive, no adaptive_config) per level: throughput,
    share_of_best_static, share_of_best_chain, share_of_baseline, tier_key and
    candidate_steps (sglang 0.5.23's defaults), steps_share. A reference, not a verdict."""
    ok = ok_levels(levels)
    adaptive = ok[adaptive_mask(ok)]
    if "adaptive_config" in adaptive.columns:
        adaptive = adaptive[adaptive["adaptive_config"].isna()]
    _, table, chains, base = _reference(ok)
    out = []
    for r in adaptive.sort_values(["variant", "concurrency"]).itertuples():
        c, t = int(r.concurrency), float(r.output_throughput)
        capture = decode_cuda_graph_batch_sizes(run_max_bs(ok[ok["variant"] == r.variant])[0])
        key = route(DEFAULT_TIERS, c, capture)
        base_t = table.at[c, base] if base and c in table.index else math.nan
        out.append(
            {
                "variant": r.variant,
                "concurrency": c,
                "throughput": t,
                "share_of_best_static": t / _best(table, c)[1],
                "share_of_best_chain": t / _best(chains, c)[1],
                "share_of_baseline": t / base_t,
                "tier_key": key,
                "candidate_steps": DEFAULT_TIERS[key],
                "steps_share": parse_shares(getattr(r, "adaptive_steps_share", None)),
            }
        )
    return pd.DataFrame(out)


def verify_adaptive(
    levels: pd.DataFrame, *, tolerance: float = 0.03, min_share_intended: float = 0.9
) -> list[Verification]:
    """One Verification per adaptive variant with its own tiers (see the module docstring)."""
    ok = ok_levels(levels)
    if "adaptive_config" not in ok.columns:
        return []
    # every tier [0]: the engine's steps 0, a reference the others are judged against
    pinned = ok[pinned_zero_mask(ok)]
    adaptive = ok[adaptive_mask(ok) & ok["adaptive_config"].notna() & ~pinned_zero_mask(ok)]
    static, table, chains_table, base = _reference(ok)
    defaults = default_tiers_reference(levels)
    out = []
    for name, rows in adaptive.groupby("variant", sort=True):
        zero = _same_family(pinned, rows)
        args = (static, table, chains_table, base, defaults, tolerance, min_share_intended, zero)
        out.append(_verify(str(name), rows, *args))
    return out


def _same_family(candidates: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The candidates of `rows`' algorithm, draft model and spec v2 path."""
    first = rows.iloc[0]
    return candidates[
        (candidates["algorithm"].map(_algo) == _algo(first["algorithm"]))
        & (candidates["draft_model_path"].fillna("") == (first.get("draft_model_path") or ""))
        & (candidates["spec_v2"].astype(bool) == bool(first["spec_v2"]))
    ]


def _family_chains(rows: pd.DataFrame, static: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    chains = static[chain_mask(static)]
    same = _same_family(chains, rows)
    if same.empty and not chains.empty:
        return chains, ["no static chain of its algorithm/draft model: compared with any chain"]
    return same, []


def _verify(
    name: str,
    rows: pd.DataFrame,
    static: pd.DataFrame,
    table: pd.DataFrame,
    all_chains: pd.DataFrame,
    base: str | None,
    defaults: pd.DataFrame,
    tolerance: float,
    min_share: float,
    zero: pd.DataFrame,
) -> Verification:
    tiers = parse_tiers(str(rows["adaptive_config"].iloc[0]))
    zero_t = zero.groupby("concurrency")["output_throughput"].mean()
    zero_name = str(zero["variant"].iloc[0]) if len(zero) else None
    max_bs, _ = run_max_bs(rows)
    capture = decode_cuda_graph_batch_sizes(max_bs)
    chains, notes = _family_chains(rows, static)
    chain_table = _table(chains) if not chains.empty else all_chains
    refs = pd.concat([static, zero])
    cv_static = refs.assign(_cv=row_cv(refs)).pivot_table(
        index="concurrency", columns="variant", values="_cv"
    )
    default_t = (
        defaults.groupby("concurrency")["throughput"].max() if len(defaults) else pd.Series()
    )
    records = []
    for r in rows.assign(cv_=row_cv(rows)).sort_values("concurrency").itertuples():
        c, t = int(r.concurrency), float(r.output_throughput)
        best_v, best_t = _best(table, c)
        chain_v, chain_t = _best(chain_table, c)
        base_t = table.at[c, base] if base and c in table.index else math.nan
        key = route(tiers, c, capture)
        intended = tiers[key]
        shares = parse_shares(getattr(r, "adaptive_steps_share", None))
        share_in = sum(v for s, v in shares.items() if s in intended) if shares else math.nan
        as_intended = shares is not None and share_in >= min_share
        if c in zero_t.index:  # measured: a tier config's best is a chain or the engine's 0
            if chain_v is not None and chain_t >= zero_t[c]:
                source, reach, ref = f"the best chain, {chain_v}", chain_t, chain_v
            else:
                source, reach, ref = f"steps 0 in the engine, {zero_name}", zero_t[c], zero_name
        elif intended == [0] and as_intended:
            source, reach, ref = "itself (a tier [0] can do nothing else)", t, None
        elif intended == [0] or chain_v is None:
            source, reach, ref = f"the best static, {best_v}", best_t, best_v
        else:
            source, reach, ref = f"the best chain, {chain_v}", chain_t, chain_v
        # a reference measured once has no CV (no column: the pivot drops all-NaN ones)
        known = ref in cv_static.columns and c in cv_static.index
        cv_ref = cv_static.at[c, ref] if ref and known else math.nan
        noise = 0.0 if ref is None else 2 * math.hypot(r.cv_, cv_ref)
        # a gap inside the repeats' 2-sigma spread is not evidence of falling short (the
        # export resolves near-ties within that spread to fewer steps on purpose)
        ok = t >= (1 - max(tolerance, 0.0 if math.isnan(noise) else noise)) * reach
        cause, reason = None, "ok"
        if not ok:
            where = (c, key, intended, tiers, capture)
            cause, reason = _cause(*where, shares, share_in, noise, min_share)
        steps0 = 1 - t / base_t if intended == [0] and as_intended else math.nan
        if intended == [0] and shares is None:
            notes.append(f"c={c}: tier [0] without a step trace: its cost is not attributed")
        records.append(
            {
                "concurrency": c,
                "throughput": t,
                "best_static_variant": best_v,
                "best_static_throughput": best_t,
                "best_chain_variant": chain_v,
                "best_chain_throughput": chain_t,
                "baseline_throughput": base_t,
                "default_throughput": default_t.get(c, math.nan),
                "share_of_best_static": t / best_t,
                "share_of_default": t / default_t.get(c, math.nan),
                "share_of_baseline": t / base_t,
                "tier_key": key,
                "intended_steps": intended,
                "steps_share": shares,
                "share_intended": share_in,
                "reachable_source": source,
                "reachable_throughput": reach,
                "share_of_reachable": t / reach,
                "noise": noise,
                "ok": bool(ok),
                "cause": cause,
                "reason": reason,
                "steps0_cost": steps0,
            }
        )
    frame = pd.DataFrame(records)
    return Verification(name, tiers, max_bs, frame, tolerance, _overhead(frame), tuple(notes))


def _cause(
    c: int,
    key: int,
    intended: list[int],
    tiers: dict[int, list[int]],
    capture: list[int],
    shares: dict[int, float] | None,
    share_in: float,
    noise: float,
    min_share: float,
) -> tuple[str, str]:
    want = " or ".join(map(str, intended))
    if shares is None:
        return "no_trace", (
            f"step trace unavailable (no adaptive_steps_share): cannot tell whether it ran "
            f"steps {want} as intended"
        )
    if share_in < min_share:
        off = _shares_text(shares, [s for s in shares if s not in intended])
        text = (
            f"ran steps {off} of the time instead of {want}: batch sizes between the measured "
            "levels were routed to the neighbouring tier"
        )
        padded = pad_batch(c, capture)
        below = [s for s in capture if s < padded]
        if key != min(tiers) and (key == padded or (below and key == below[-1])):
            text += (
                f"; a tier boundary (key {key}) too close to this level: a batch a little "
                f"below {c} (requests finishing) falls into the tier below"
            )
        return "off_tier", text
    if len(intended) > 1 and sum(v >= RAN for v in shares.values()) > 1:
        return "probing", f"the EMA was still probing (ran steps {_shares_text(shares)})"
    spread = "" if math.isnan(noise) else f" (±{noise:.1%} from the repeats)"
    return "as_intended", (
        f"ran as intended; the gap is the adaptive runtime's own cost or noise{spread}"
    )


def _overhead(frame: pd.DataFrame) -> str | None:
    zero = frame[frame["steps0_cost"].notna()]
    if zero.empty:
        return None
    lv = [int(c) for c in zero["concurrency"]]
    upper = lv == [int(c) for c in frame["concurrency"] if c >= lv[0]]
    where = f"c>={lv[0]}" if upper and len(lv) > 1 else "c=" + ", ".join(map(str, lv))
    cost, lo, hi = zero["steps0_cost"].mean(), zero["steps0_cost"].min(), zero["steps0_cost"].max()
    span = f" ({lo:+.1%} to {hi:+.1%})" if f"{lo:.1%}" != f"{hi:.1%}" else ""
    if cost < NEGLIGIBLE:
        return (
            f"turning speculation off in the engine costs {max(cost, 0):.1%} at {where} "
            f"against a server without speculation{span}: negligible"
        )
    advice = f"at or above c={lv[0]}" if upper else f"at {where}"
    return (
        f"turning speculation off in the engine costs {cost:.1%} at {where} against a server "
        f"without speculation{span}; if your load stays {advice}, run without it"
    )
