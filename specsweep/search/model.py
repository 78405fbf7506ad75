"""SpecModel: a fitted model of speculative decoding that predicts unlaunched variants.

The adaptive search (``specsweep.search.planner``) asks it, for every variant not yet
launched and every concurrency level, for the output throughput with a 95% interval; it
launches the variant whose upper bound beats the best measured throughput by the most and
stops when no upper bound does. A too-low upper bound misses a winner, so every source of
uncertainty below widens the interval rather than being guessed away. Predictions are
never written into the measured levels. Pure functions of one run's tables: no I/O, no
Prefect.

Batch and baseline (measured, not fitted)
    ``B = min(C, max_running_requests)`` is the batch the server decodes. The baseline's
    decode step at its level is ``t_b(B) = 1000 / decode_tok_s_per_stream`` (ms); between
    and beyond the measured batches ``t_b`` is linear in ``B`` (as a decode step is,
    ``t0 + a B``) through the neighbouring points.

Cost of a speculative cycle (``s`` steps, top-k ``k``, ``n`` draft tokens)
    A measured variant's cycle is ``T(B) = 1000 * accept_length / decode_tok_s_per_stream``
    and its excess over the baseline step is fitted as::

        T - t_b = o + d0*s + d1*s*B*k + kappa*B*(n-1) + m*B [+ h*knee_K(B, n)]

    ``o`` fixed speculative overhead (tree build, launches, the draft extend's fixed part,
    the scheduling that overlap would hide), ``d0 + d1*B*k`` one draft forward over ``B*k``
    tokens, ``kappa`` the verify's extra tokens (and the draft extend over them), ``m``
    the per-request bookkeeping (draft KV slots, masks, accept-path moves). This is the
    simulator's cycle (``specsweep.sim.perf_model``) rearranged: its draft extend
    ``d0 + d1*B*n`` splits into ``o``, ``kappa`` and ``m``. Real GPUs turn from memory-bound
    to compute-bound past a number of tokens per forward, so one optional roofline term
    ``knee_K = max(0, B*n - K) - max(0, B - K)`` (the verify's tokens beyond ``K`` that a
    plain decode does not pay) is kept when some ``K`` of a fixed ladder lowers the weighted
    residual by more than a third; CUDA-graph padding and MoE routing are not modelled and
    show up as residuals. All coefficients are >= 0 (exhaustive non-negative least squares
    over the column subsets, at most 6 columns), each point weighted by ``1/T`` so the fit
    minimises relative errors of the cycle time (which are relative errors of throughput).

    Identification: with chains only (``k = 1``, ``n = s + 1``) ``d1`` and ``kappa`` are the
    same column; with one step count ``o`` and ``d0`` are. Such splits are not guessed: the
    set of non-negative coefficient vectors that reproduce the fitted values exactly is a
    polytope, its vertices are enumerated (basic solutions), and a prediction is evaluated
    at every vertex: the interval spans them, the central value is their mean.

Acceptance
    ``q_{k,j}``: probability that draft position ``j`` is accepted given the previous were.
    Chains: ``q_{1,j} = p * r**(j-1)``, ``p, r`` in ``(0, 1]``. Accept length (bonus token
    included) ``alpha = 1 + sum_{i=1..D} prod_{j<=i} q_j`` with ``D = min(s, n-1)``. Trees of
    width ``k``: ``q_{k,j} = 1 - (1 - q_{1,j})**g`` with ``g = w**gamma_k``, ``gamma_k`` in
    ``[0, 1]`` (``g`` in ``[1, w]``: a tree is at least a chain and at most ``w``
    independent tries); a tree whose ``n - 1 < s*k`` cannot fill every level, so its
    effective width is ``w = clip((n-1)/s, 1, k)`` (the simulator's approximation).
    ``gamma_k`` is profiled per measured top-k (grid of 0.04, refined to 0.005 on the
    region); a width that top-k was not measured at also spans ``gamma_k +- 0.05`` (the
    power law in ``w`` is an assumption); an unmeasured top-k spans ``[0, 1]``.

    Data: a variant's mean accept length (sum tokens / sum verify steps over its ok levels,
    standard error from the spread over levels, floored at 1%). Where the server reports
    each request's ``spec_correct_drafts_histogram`` (sglang 0.5.23's ``meta_info`` on
    ``/generate``: its verify steps counted by drafts accepted), the summed histograms give
    ``P(L >= i+1)`` at every position ``i <= D`` from every verify step, whatever the
    stream interval; they replace the mean as chunks do (below) and are preferred to them.
    When its streamed chunks
    carry one verify step each (``max_chunk_tokens <= D + 1`` for every request, sglang's
    default ``--stream-interval 1``), the chunk sizes (each request's first chunk, the
    prefill token, and last chunk, possibly truncated, left out) give ``P(L >= i+1)`` for
    every position ``i <= D``; those replace the mean (binomial standard errors, floored
    at 0.01), so one launched chain pins ``p`` and ``r``. Chunks are used only where every
    request's chunks add up to its output tokens: a server that ignores
    ``continuous_usage_stats`` streams several tokens per chunk with no count, and one
    token per chunk would read as "no draft is ever accepted" (an acceptance of 0.001 and
    every variant predicted at the baseline). Without trustworthy chunks and without accept
    lengths (OpenAI endpoints carry no ``spec_verify_ct``) nothing is fitted: ``blind``
    says why, and the search launches what it cannot predict. ``(p, r)`` is fitted on a grid
    (coarse, then fine around the 95% region) by chi-square; the region is
    ``chi2 <= min + 5.99 * max(1, chi2_min/dof)`` (2 parameters; scaled up when the
    geometric form misfits) and predictions range over it. One step count and no chunks
    leave ``r`` free along a curve: predictions for other step counts are then wide.

Prediction at level ``C``
    The variant's decode rate (tokens per ms for the batch) is ``B_s * alpha / T(B_s)``.
    How a decode rate becomes output throughput at that level is itself fitted on what
    was measured there: ``1/thr = a_C + beta_C / rate`` over the baseline and every
    measured variant of the level (least squares; through the origin when ``a_C`` comes
    out negative; proportional to the baseline's when it is the only point). A closed
    loop does not turn a faster decode into proportionally more throughput (prefill, the
    wait for the next cycle and the client's time between requests do not shrink with
    it): on the simulator the proportional rule over-predicted by 2-5% at ``c >= 2``, the
    fitted map by -0.2% to +0.1% (median over the unlaunched variants of three profiles).
    ``lo``/``hi``: the extremes over the acceptance region (and ``gamma`` range) and the
    cost vertices, then widened multiplicatively by
    ``sqrt(e_model**2 + e_base**2 + e_extra**2)``: ``e_model`` the model's own 95%
    relative error measured on the data (leave-one-variant-out cycle-time errors of the
    cost fit, distance to the held-out range, 2x their RMS, floored at 1.5% from five
    variants on, 3% with three or four, 8% with fewer; a 2% acceptance floor; and 2x the
    RMS residual of the throughput maps fitted on three or more points), ``e_base`` the
    baseline's measured relative interval (``output_throughput_lo/_hi``, else 3%) where
    the level's map rests on fewer than three points (with more, their scatter is in
    ``e_model``), ``e_extra`` 5% per doubling of ``B`` beyond the largest measured
    speculative batch (the knee the data did not show) plus 3% per step beyond the
    deepest measured draft position.

What it does not cover (``predict`` returns ``None``): adaptive and NGRAM variants, a
different algorithm, draft model or spec-v2 setting than the measured speculative
variants (when several such groups were measured, the one with most variants is fitted),
other extra_args/env (the labels' ``settings_suffix``; for named variants the stored
settings must be the baseline's plus the variant's own), levels without an ok baseline
row, and any speculative variant before one was measured. One row per (variant, level)
is assumed: with several load shapes per level, filter to one shape before fitting.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specsweep.config import Variant
from specsweep.config.redact import is_secret_name, redact_args

_SUFFIX = re.compile(r"-x([0-9a-f]{6})$")
_SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
_KNEES = (16, 32, 64, 128, 256, 512, 1024, 2048)
_COST_NAMES = ("o_ms", "d0_ms", "d1_ms", "kappa_ms", "m_ms", "knee_ms")
_BASE_REL = 0.03  # baseline interval when the level has none
_COST_FLOOR = 0.03  # smallest 95% relative model error allowed (3 or 4 variants)
_COST_FLOOR_MANY = 0.015  # the same once 5 variants (tens of held-out points) measure it
_MANY = 5
_COST_PRIOR = 0.08  # the same with fewer than three variants to measure it on
_ACC_FLOOR = 0.02
_EXTRAP_B = 0.05  # per doubling of B beyond the measured speculative batches
_EXTRAP_DEPTH = 0.03  # per draft position beyond the deepest measured
_GAMMAS = np.linspace(0.0, 1.0, 26)


@dataclass(frozen=True)
class Predicted:
    """A prediction, never a measurement."""

    value: float  # predicted output throughput, tok/s (same unit as levels.output_throughput)
    lo: float  # 95% prediction interval
    hi: float
    accept_length: float  # predicted mean tokens per verify step (1.0 for the baseline)


@dataclass(frozen=True)
class _BaseLevel:
    thr: float
    lo: float
    hi: float
    batch: float
    step_ms: float


@dataclass
class _AccObs:
    """One variant's acceptance data: mean accept length or per-position survival."""

    label: str
    steps: int
    topk: int
    width: float
    depth: int
    values: np.ndarray  # [alpha] or [S_1..S_D]
    ses: np.ndarray
    source: str = "means"  # means: [alpha]; chunks or histograms: [S_1..S_D]

    @property
    def survival(self) -> bool:
        return self.source != "means"


@dataclass
class _Acc:
    """The (p, r) region and the profiled gamma per top-k at each region point."""

    p: np.ndarray
    r: np.ndarray
    gammas: dict[int, np.ndarray] = field(default_factory=dict)
    widths: dict[int, tuple[float, ...]] = field(default_factory=dict)
    best: int = 0
    source: str = "means"
    max_depth: int = 0
    chi2_min: float = 0.0
    dof: int = 0


def _isnum(x: Any) -> bool:
    return x is not None and isinstance(x, int | float | np.number) and math.isfinite(float(x))


def _width(steps: int, topk: int, ndraft: int) -> float:
    return float(min(topk, max(1.0, (ndraft - 1) / max(steps, 1))))


def _survival(p: np.ndarray, r: np.ndarray, g: np.ndarray | float, depth: int) -> np.ndarray:
    """P(L >= i+1), i = 1..depth; p, r (G,), g scalar, (H,) or (G, H) -> (G, [H,] depth)."""
    j = np.arange(depth)
    q1 = np.minimum(p[:, None] * r[:, None] ** j, 1.0)  # (G, D)
    if np.ndim(g) == 0:
        q = 1.0 - (1.0 - q1) ** float(g)
        return np.cumprod(q, axis=-1)
    ga = np.asarray(g)
    ga = ga[:, :, None] if ga.ndim == 2 else ga[None, :, None]  # per point or shared
    q = 1.0 - (1.0 - q1[:, None, :]) ** ga
    return np.cumprod(q, axis=-1)


def _obs_chi2(obs: _AccObs, surv: np.ndarray) -> np.ndarray:
    """chi2 of one observation against survival curves (..., D)."""
    if obs.survival:
        return (((surv - obs.values) / obs.ses) ** 2).sum(axis=-1)
    alpha = 1.0 + surv.sum(axis=-1)
    return ((alpha - obs.values[0]) / obs.ses[0]) ** 2


def _acc_chi2(
    p: np.ndarray,
    r: np.ndarray,
    chains: list[_AccObs],
    trees: dict[int, list[_AccObs]],
    gammas: np.ndarray,
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Total chi2 at each (p, r) and the best gamma (of ``gammas``) per top-k there."""
    chi = np.zeros(p.shape[0])
    for obs in chains:
        chi += _obs_chi2(obs, _survival(p, r, 1.0, obs.depth))
    best: dict[int, np.ndarray] = {}
    for k, group in trees.items():
        part = _tree_chi2(p, r, group, gammas)
        idx = part.argmin(axis=1)
        chi += part[np.arange(p.shape[0]), idx]
        best[k] = gammas[idx]
    return chi, best


def _tree_chi2(
    p: np.ndarray, r: np.ndarray, group: list[_AccObs], gammas: np.ndarray
) -> np.ndarray:
    """chi2 of one top-k's trees at each (p, r) and gamma: (G, H); gammas (H,) or (G, H)."""
    part = np.zeros((p.shape[0], gammas.shape[-1]))
    for width in sorted({o.width for o in group}):
        same = [o for o in group if o.width == width]
        surv = _survival(p, r, width**gammas, max(o.depth for o in same))
        for obs in same:
            part += _obs_chi2(obs, surv[..., : obs.depth])
    return part


def _fit_acceptance(chains: list[_AccObs], trees: dict[int, list[_AccObs]]) -> _Acc | None:
    """Grid chi-square fit of (p, r) with gamma_k profiled; the 95% region, coarse then fine."""
    n_obs = sum(o.values.size for o in chains) + sum(
        o.values.size for g in trees.values() for o in g
    )
    if n_obs == 0:
        return None
    dof = max(n_obs - 2 - len(trees), 0)
    coarse = np.linspace(0.02, 1.0, 50)
    pp, rr = (a.ravel() for a in np.meshgrid(coarse, coarse, indexing="ij"))
    chi, _ = _acc_chi2(pp, rr, chains, trees, _GAMMAS)
    lo = chi.min()
    delta = 5.99 * max(1.0, lo / dof if dof else 1.0)
    inside = chi <= lo + delta + 9.0  # generous box for the fine grid
    p0, p1 = pp[inside].min() - 0.03, pp[inside].max() + 0.03
    r0, r1 = rr[inside].min() - 0.03, rr[inside].max() + 0.03
    fp = np.linspace(max(p0, 1e-3), min(p1, 1.0), 80)
    fr = np.linspace(max(r0, 1e-3), min(r1, 1.0), 80)
    pp, rr = (a.ravel() for a in np.meshgrid(fp, fr, indexing="ij"))
    chi, gam = _acc_chi2(pp, rr, chains, trees, _GAMMAS)
    lo = float(chi.min())
    delta = 5.99 * max(1.0, lo / dof if dof else 1.0)
    keep = np.flatnonzero(chi <= lo + delta)
    if keep.size > 400:  # thin the region for fast predictions, keeping its extremes
        extremes = {int(keep[np.argmin(pp[keep])]), int(keep[np.argmax(pp[keep])])}
        extremes |= {int(keep[np.argmin(rr[keep])]), int(keep[np.argmax(rr[keep])])}
        step = keep[:: math.ceil(keep.size / 400)]
        keep = np.unique(np.concatenate([step, np.array(sorted(extremes))]))
    best_global = int(np.argmin(chi))
    if best_global not in keep:
        keep = np.unique(np.append(keep, best_global))
    gammas = {}
    for k, group in trees.items():  # refine gamma around the grid's best, region points only
        local = np.clip(gam[k][keep][:, None] + np.linspace(-0.04, 0.04, 17)[None, :], 0, 1)
        part = _tree_chi2(pp[keep], rr[keep], group, local)
        gammas[k] = local[np.arange(keep.size), part.argmin(axis=1)]
    acc = _Acc(
        p=pp[keep],
        r=rr[keep],
        gammas=gammas,
        widths={k: tuple(sorted({o.width for o in g})) for k, g in trees.items()},
        best=int(np.flatnonzero(keep == best_global)[0]),
        chi2_min=lo,
        dof=dof,
    )
    all_obs = chains + [o for g in trees.values() for o in g]
    sources = {o.source for o in all_obs}
    acc.source = next((s for s in ("histograms", "chunks") if s in sources), "means")
    acc.max_depth = max(o.depth for o in all_obs)
    return acc


def _ok_requests(label: str, rows: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The variant's requests without an error, at its ok levels (`rows`)."""
    req = requests[
        (requests["variant"] == label) & requests["concurrency"].isin(rows["concurrency"])
    ]
    return req[req["error"].isna()] if "error" in req else req


def _survival_obs(label: str, depth: int, surv: np.ndarray, total: int, source: str) -> _AccObs:
    """Per-position survival from `total` verify steps, binomial standard errors (>= 0.01)."""
    ses = np.maximum(np.sqrt(surv * (1 - surv) / total), 0.01)
    return _AccObs(label, 0, 1, 1.0, depth, surv, ses, source)


def _chunks_add_up(req: pd.DataFrame) -> bool:
    """Every request's chunk tokens are known and sum to its output tokens (rows written
    before the client checked this hold one token per chunk where the server sent more)."""
    if "output_tokens" not in req:
        return False
    for chunks, total in zip(req["chunk_tokens"], req["output_tokens"], strict=True):
        if chunks is None or not _isnum(total) or int(np.sum(chunks)) != int(total):
            return False
    return True


def _blind_reason(spec: pd.DataFrame, requests: pd.DataFrame | None) -> str:
    """Why the measured speculative variants give no acceptance to fit."""
    unknown = spec.get("chunk_tokens_unknown")
    broken = unknown is not None and bool((unknown.fillna(0) > 0).any())
    if not broken and requests is not None and "chunk_tokens" in requests:
        mine = requests[requests["variant"].isin(spec["variant"])]
        if "error" in mine:
            mine = mine[mine["error"].isna()]
        broken = not mine.empty and not _chunks_add_up(mine)
    if broken:
        return (
            "no acceptance data: the streams' chunk tokens do not add up to the server's "
            "usage (it ignores continuous_usage_stats), and the endpoint reports no verify "
            "steps; load.endpoint: generate gives accept lengths"
        )
    return (
        "no acceptance data: the speculative levels report no accept length and their "
        "streams give no per-chunk token counts"
    )


# --- cost ------------------------------------------------------------------------------


def _features(steps: Any, topk: Any, ndraft: Any, batch: Any, knee: int | None) -> np.ndarray:
    """Design rows [1, s, s*B*k, B*(n-1), B, knee_K] (the knee column only with a K)."""
    s, k, n, b = (np.asarray(x, dtype=float) for x in (steps, topk, ndraft, batch))
    cols = [np.ones_like(b), s + 0 * b, s * b * k, b * (n - 1), b]
    if knee is not None:
        cols.append(np.maximum(0.0, b * n - knee) - np.maximum(0.0, b - knee))
    return np.stack(cols, axis=-1)


def _nnls(a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact non-negative least squares by enumerating column subsets (<= 6 columns)."""
    m = a.shape[1]
    best, best_sse = np.zeros(m), float(y @ y)
    for size in range(1, m + 1):
        for cols in itertools.combinations(range(m), size):
            sub = a[:, cols]
            coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if (coef < -1e-12).any():
                continue
            res = y - sub @ coef
            sse = float(res @ res)
            if sse < best_sse - 1e-12 * max(best_sse, 1.0):
                best, best_sse = np.zeros(m), sse
                best[list(cols)] = np.maximum(coef, 0.0)
    return best, best_sse


def _vertices(a: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Vertices of {x >= 0 : a x = a theta}: every coefficient split the data cannot tell apart."""
    target = a @ theta
    m = a.shape[1]
    rank = np.linalg.matrix_rank(a)
    scale = max(float(np.abs(target).max()), 1e-9)
    out = []
    for cols in itertools.combinations(range(m), rank):
        sub = a[:, cols]
        if np.linalg.matrix_rank(sub) < rank:
            continue
        coef, *_ = np.linalg.lstsq(sub, target, rcond=None)
        if (coef < -1e-9 * scale).any():
            continue
        if np.abs(sub @ coef - target).max() > 1e-6 * scale:
            continue
        x = np.zeros(m)
        x[list(cols)] = np.maximum(coef, 0.0)
        out.append(x)
    if not out:
        return theta[None, :]
    return np.unique(np.round(np.array(out), 12), axis=0)


@dataclass
class _Cost:
    theta: np.ndarray
    vertices: np.ndarray
    knee: int | None
    rel_rms: float  # in-sample weighted (relative) residual RMS
    loo: list[float]  # leave-one-variant-out relative cycle-time errors


def _fit_cost_once(pts: pd.DataFrame, knee: int | None) -> tuple[np.ndarray, float, np.ndarray]:
    a = _features(pts["s"], pts["k"], pts["n"], pts["B"], knee)
    w = 1.0 / pts["T"].to_numpy()
    aw = a * w[:, None]
    yw = pts["excess"].to_numpy() * w
    active = np.abs(aw).max(axis=0) > 0
    theta = np.zeros(a.shape[1])
    sub, sse = _nnls(aw[:, active], yw)
    theta[active] = sub
    return theta, sse, aw[:, active]


def _fit_cost(pts: pd.DataFrame) -> _Cost:
    _, sse, _ = _fit_cost_once(pts, None)
    knee: int | None = None
    if pts["label"].nunique() >= 2 and len(pts) >= 8:
        for k in _KNEES:
            th, s2, _ = _fit_cost_once(pts, k)
            if th[-1] > 0 and s2 < 0.66 * sse:
                sse, knee = s2, k
    th, sse, aw = _fit_cost_once(pts, knee)
    active = np.abs(_features(pts["s"], pts["k"], pts["n"], pts["B"], knee)).max(axis=0) > 0
    verts_sub = _vertices(aw, th[active])
    verts = np.zeros((verts_sub.shape[0], th.size))
    verts[:, active] = verts_sub
    rel_rms = math.sqrt(sse / max(len(pts), 1))
    loo: list[float] = []
    labels = pts["label"].unique()
    if labels.size >= 3:
        for label in labels:
            train, test = pts[pts["label"] != label], pts[pts["label"] == label]
            th2, _, aw2 = _fit_cost_once(train, knee)
            act2 = np.abs(_features(train["s"], train["k"], train["n"], train["B"], knee))
            act2 = act2.max(axis=0) > 0
            v_sub = _vertices(aw2, th2[act2])
            v = np.zeros((v_sub.shape[0], th2.size))
            v[:, act2] = v_sub
            x = _features(test["s"], test["k"], test["n"], test["B"], knee)
            pred = test["tb"].to_numpy()[:, None] + x @ v.T
            lo, hi = pred.min(axis=1), pred.max(axis=1)
            t = test["T"].to_numpy()
            err = np.where(t < lo, (lo - t) / t, np.where(t > hi, (t - hi) / t, 0.0))
            loo.extend(float(e) for e in err)
    return _Cost(theta=th, vertices=verts, knee=knee, rel_rms=rel_rms, loo=loo)


# --- the model -------------------------------------------------------------------------


def _settings_key(row: pd.Series) -> tuple[str, str]:
    """(extra_args, env) as stored, without the spec-v2 switch (the group says that)."""
    args, env = _settings(row)
    return json.dumps(args), json.dumps(env, sort_keys=True)


def _settings(row: pd.Series) -> tuple[list[str], dict[str, str]]:
    """A level row's extra_args and non-secret env (without the spec-v2 switch)."""
    try:
        args = json.loads(row.get("extra_args") or "[]")
        env = json.loads(row.get("env") or "{}")
    except (TypeError, ValueError):
        args, env = [], {}
    args = [str(a) for a in args] if isinstance(args, list) else []
    env = env if isinstance(env, dict) else {}
    env = {str(k): str(v) for k, v in env.items() if k != _SPEC_V2_ENV and not is_secret_name(k)}
    return args, env


def _mode(values: pd.Series) -> Any:
    vals = values.dropna()
    return None if vals.empty else vals.mode().iloc[0]


class SpecModel:
    """Baseline step time (measured), cycle cost and acceptance (fitted), on one run."""

    fit_on: tuple[str, ...]

    def __init__(self) -> None:
        self.fit_on = ()
        self._baseline_label: str | None = None
        self._base: dict[int, _BaseLevel] = {}
        self._tb_b = np.zeros(0)
        self._tb_t = np.zeros(0)
        self._group: dict[str, Any] | None = None
        self._cost: _Cost | None = None
        self._acc: _Acc | None = None
        self._e_cost = _COST_PRIOR
        self._e_acc = _ACC_FLOOR
        self._map: dict[int, tuple[float, float]] = {}  # level -> (a, beta): thr from rate
        self._map_points: dict[int, int] = {}  # level -> measured points the map was fitted on
        self._e_map = 0.0
        self._max_b = 0.0
        self._mrr: int | None = None
        self._measured: dict[str, Any] = {}
        self._settings_pair: tuple[Any, Any] = (([], {}), ([], {}))
        self.blind: str | None = None  # why no acceptance could be fitted (None: it was)

    # -- fit ----------------------------------------------------------------------------
    @classmethod
    def fit(cls, levels: pd.DataFrame, requests: pd.DataFrame | None = None) -> SpecModel:
        """Fit on the ok level rows of one run on one target (and its request rows)."""
        model = cls()
        if levels is None or levels.empty or "status" not in levels:
            return model
        ok = levels[levels["status"] == "ok"].copy()
        ok = ok[ok["output_throughput"].map(_isnum) & (ok["output_throughput"] > 0)]
        model._fit_baseline(ok)
        if model._tb_b.size:
            model._fit_spec(ok, requests)
        used = [model._baseline_label] if model._baseline_label else []
        used += list(model._measured.get("labels", ()))
        model.fit_on = tuple(sorted(set(used)))
        return model

    @staticmethod
    def _batch(c: float, mrr: Any) -> float:
        return float(min(c, mrr)) if _isnum(mrr) and mrr > 0 else float(c)

    def _fit_baseline(self, ok: pd.DataFrame) -> None:
        base = ok[ok["is_baseline"].astype(bool)]
        if base.empty:
            return
        label = base["variant"].value_counts().index[0]
        self._baseline_label = str(label)
        base = base[base["variant"] == label]
        for _, row in base.iterrows():
            thr = float(row["output_throughput"])
            lo, hi = row.get("output_throughput_lo"), row.get("output_throughput_hi")
            lo = float(lo) if _isnum(lo) else thr * (1 - _BASE_REL)
            hi = float(hi) if _isnum(hi) else thr * (1 + _BASE_REL)
            rate = row.get("decode_tok_s_per_stream")
            step = 1000.0 / float(rate) if _isnum(rate) and rate > 0 else math.nan
            c = int(row["concurrency"])
            b = self._batch(c, row.get("max_running_requests"))
            self._base[c] = _BaseLevel(thr, min(lo, thr), max(hi, thr), b, step)
        pts = sorted({(v.batch, v.step_ms) for v in self._base.values() if v.step_ms > 0})
        by_b: dict[float, list[float]] = {}
        for b, t in pts:
            by_b.setdefault(b, []).append(t)
        self._tb_b = np.array(sorted(by_b))
        self._tb_t = np.array([float(np.mean(by_b[b])) for b in self._tb_b])
        self._mrr = _mode(base["max_running_requests"]) if "max_running_requests" in base else None

    def _tb(self, batch: float) -> float:
        """Baseline step time at a batch: linear through the neighbouring measured batches."""
        xb, yt = self._tb_b, self._tb_t
        if xb.size == 1:
            return float(yt[0])
        i = int(np.clip(np.searchsorted(xb, batch) - 1, 0, xb.size - 2))
        slope = (yt[i + 1] - yt[i]) / (xb[i + 1] - xb[i])
        return float(max(yt[i] + slope * (batch - xb[i]), 1e-6))

    def _fit_spec(self, ok: pd.DataFrame, requests: pd.DataFrame | None) -> None:
        spec = ok[~ok["is_baseline"].astype(bool)]
        if spec.empty:
            return
        adaptive = spec["adaptive"].fillna(False).astype(bool) if "adaptive" in spec else False
        spec = spec[~adaptive & (spec["algorithm"] != "NGRAM")]
        spec = spec[spec["num_steps"].map(_isnum) & spec["topk"].map(_isnum)]
        spec = spec[spec["decode_tok_s_per_stream"].map(_isnum)]
        if spec.empty:
            return
        keys = spec.apply(
            lambda r: (
                r["algorithm"],
                r.get("draft_model_path") or "",
                bool(r["spec_v2"]),
                *_settings_key(r),
            ),
            axis=1,
        )
        counts = spec.assign(_key=keys).groupby("_key")["variant"].nunique()
        key = max(counts.index, key=lambda k: (counts[k], -len(str(k))))
        spec = spec[keys == key]
        self._group = {
            "algorithm": key[0],
            "draft_model_path": key[1] or None,
            "spec_v2": key[2],
            "settings_suffix": self._group_suffix(spec, ok),
        }
        mrr = _mode(spec["max_running_requests"]) if "max_running_requests" in spec else None
        self._mrr = mrr if mrr is not None else self._mrr
        self._fit_accept(spec, requests)
        self._fit_cost_points(spec)
        self._fit_throughput_map(spec)

    def _fit_throughput_map(self, spec: pd.DataFrame) -> None:
        """Per level, how a decode rate becomes output throughput: 1/thr = a + beta/rate.

        A closed loop does not turn a faster decode into proportionally more throughput:
        prefill, the wait for the next cycle and the client's time between requests do not
        shrink with it (on the simulator the proportional rule over-predicted by 2-5% at
        c >= 2). Fitted on the baseline and the measured variants at that level (a = 0,
        through the origin, when the free fit gives a < 0); one point: proportional."""
        resid: list[float] = []
        for c, base in self._base.items():
            if not base.step_ms > 0:
                continue
            pts = [(base.step_ms / base.batch, 1.0 / base.thr)]
            for _, row in spec[spec["concurrency"] == c].iterrows():
                rate = float(row["decode_tok_s_per_stream"])
                b = self._batch(c, row.get("max_running_requests"))
                thr = float(row["output_throughput"])
                if rate > 0 and thr > 0:
                    pts.append((1000.0 / (rate * b), 1.0 / thr))
            x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
            a, beta = 0.0, float(y[0] / x[0])
            if len(pts) >= 2:
                beta, a = (float(v) for v in np.polyfit(x, y, 1))  # slope, intercept
                if a < 0 or beta <= 0:
                    a, beta = 0.0, float((x @ y) / (x @ x))
            self._map[c] = (a, beta)
            self._map_points[c] = len(pts)
            if len(pts) >= 3:
                fitted = a + beta * x
                scale = math.sqrt(len(pts) / (len(pts) - 2))
                resid += list((y / fitted - 1.0) * scale)
        if resid:
            self._e_map = 2.0 * math.sqrt(float(np.mean(np.square(resid))))

    def _group_suffix(self, spec: pd.DataFrame, ok: pd.DataFrame) -> str | None:
        """The measured variants' settings_suffix (extra_args/env) when their labels carry
        it or they have the baseline's settings; None: compare the stored settings."""
        found = {m.group(0) for lab in spec["variant"].unique() if (m := _SUFFIX.search(lab))}
        base = ok[ok["is_baseline"].astype(bool) & (ok["variant"] == self._baseline_label)]
        self._settings_pair = (_settings(spec.iloc[0]), _settings(base.iloc[0]))
        if len(found) == 1:
            return found.pop()
        if not found and _settings_key(spec.iloc[0]) == _settings_key(base.iloc[0]):
            return ""
        return None

    def _same_settings(self, variant: Variant) -> bool:
        """Named variants (no suffix in the label): the stored settings of the measured ones
        must be the baseline's (the server's) plus this variant's own."""
        (args, env), (base_args, base_env) = self._settings_pair
        if args != [*base_args, *redact_args(variant.extra_args)]:
            return False
        own = {k: v for k, v in variant.named_env.items() if not is_secret_name(k)}
        return env == {**base_env, **own}

    def _fit_accept(self, spec: pd.DataFrame, requests: pd.DataFrame | None) -> None:
        chains: list[_AccObs] = []
        trees: dict[int, list[_AccObs]] = {}
        for label, rows in spec.groupby("variant"):
            s, k = int(rows["num_steps"].iloc[0]), int(rows["topk"].iloc[0])
            n = (
                int(rows["num_draft_tokens"].iloc[0])
                if _isnum(rows["num_draft_tokens"].iloc[0])
                else s + 1
            )
            depth = min(s, n - 1)
            if depth < 1:
                continue
            width = _width(s, k, n)
            obs = self._histogram_obs(str(label), rows, requests, depth)
            if obs is None:
                obs = self._chunk_obs(str(label), rows, requests, depth)
            if obs is None:
                acc = rows[rows["accept_length"].map(_isnum)]
                if acc.empty:
                    continue
                weights = acc["output_tokens"].fillna(1).clip(lower=1).astype(float)
                vals = acc["accept_length"].astype(float)
                mean = float(np.average(vals, weights=weights))
                se = float(vals.std(ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else 0.0
                se = max(se, 0.01 * mean)
                obs = _AccObs(str(label), s, k, width, depth, np.array([mean]), np.array([se]))
            obs.steps, obs.topk, obs.width = s, k, width
            if width <= 1.0:
                chains.append(obs)
            else:
                trees.setdefault(k, []).append(obs)
        self._acc = _fit_acceptance(chains, trees)
        if self._acc is None:
            self.blind = _blind_reason(spec, requests)
        # variants each with its mean accept length, for the cost points
        self._measured["alpha"] = {
            o.label: (float(o.values[0]) if not o.survival else 1.0 + float(o.values.sum()))
            for o in chains + [o for g in trees.values() for o in g]
        }

    @staticmethod
    def _chunk_obs(
        label: str, rows: pd.DataFrame, requests: pd.DataFrame | None, depth: int
    ) -> _AccObs | None:
        """Per-position survival from streamed chunks when each chunk is one verify step."""
        if requests is None or requests.empty or "chunk_tokens" not in requests:
            return None
        req = _ok_requests(label, rows, requests)
        if req.empty or not _chunks_add_up(req):
            return None
        mx = req.get("max_chunk_tokens")
        if mx is None or not mx.map(_isnum).all() or int(mx.max()) > depth + 1:
            return None
        sizes: list[np.ndarray] = []
        for chunks in req["chunk_tokens"]:
            if chunks is None or len(chunks) < 3:
                continue
            sizes.append(np.asarray(chunks, dtype=int)[1:-1])
        if not sizes:
            return None
        lengths = np.concatenate(sizes)
        total = lengths.size
        if total < 50 or lengths.min() < 1:
            return None
        surv = np.array([(lengths >= i + 1).sum() / total for i in range(1, depth + 1)])
        return _survival_obs(label, depth, surv, total, "chunks")

    @staticmethod
    def _histogram_obs(
        label: str, rows: pd.DataFrame, requests: pd.DataFrame | None, depth: int
    ) -> _AccObs | None:
        """Per-position survival from the server's per-request histograms of drafts
        accepted per verify step: ``S_i`` = share of steps that accepted ``i`` or more."""
        column = "spec_correct_drafts_histogram"
        if requests is None or requests.empty or column not in requests:
            return None
        req = _ok_requests(label, rows, requests)
        hists = [np.asarray(h, dtype=np.int64) for h in req[column] if h is not None and len(h)]
        if not hists or len(hists) < len(req):  # every ok request's, or none: not a sample
            return None
        counts = np.zeros(max(depth + 1, max(h.size for h in hists)), dtype=np.int64)
        for h in hists:
            counts[: h.size] += h
        total = int(counts.sum())
        if total < 50 or counts[depth + 1 :].any():  # more accepted than D: not this shape
            return None
        tail = np.cumsum(counts[::-1])[::-1]  # tail[i]: steps that accepted i or more
        return _survival_obs(label, depth, tail[1 : depth + 1] / total, total, "histograms")

    def _fit_cost_points(self, spec: pd.DataFrame) -> None:
        alphas = self._measured.get("alpha", {})
        rows = []
        for _, row in spec.iterrows():
            label = str(row["variant"])
            rate = float(row["decode_tok_s_per_stream"])
            a = row.get("accept_length")
            a = float(a) if _isnum(a) else alphas.get(label)
            if a is None or rate <= 0:
                continue
            s, k = int(row["num_steps"]), int(row["topk"])
            n = int(row["num_draft_tokens"]) if _isnum(row["num_draft_tokens"]) else s + 1
            b = self._batch(int(row["concurrency"]), row.get("max_running_requests"))
            t = 1000.0 * a / rate
            tb = self._tb(b)
            rows.append({"label": label, "s": s, "k": k, "n": n, "B": b, "T": t, "tb": tb,
                         "excess": t - tb})  # fmt: skip
        if not rows:
            return
        pts = pd.DataFrame(rows)
        self._cost = _fit_cost(pts)
        self._max_b = float(pts["B"].max())
        self._measured["labels"] = sorted(pts["label"].unique())
        self._measured["steps"] = sorted({int(s) for s in pts["s"]})
        self._measured["topks"] = sorted({int(k) for k in pts["k"]})
        self._measured["points"] = len(pts)
        loo = self._cost.loo
        variants = len(set(pts["label"]))
        if variants >= 3 and loo:
            rms = math.sqrt(float(np.mean(np.square(loo))))
            floor = _COST_FLOOR_MANY if variants >= _MANY else _COST_FLOOR
            self._e_cost = max(floor, 2.0 * rms, 2.0 * self._cost.rel_rms)
        else:
            self._e_cost = max(_COST_PRIOR, 2.0 * self._cost.rel_rms)

    # -- predict ------------------------------------------------------------------------
    def _covers(self, variant: Variant) -> bool:
        g = self._group
        if g is None or variant.is_adaptive or variant.algorithm == "NGRAM":
            return False
        if variant.algorithm != g["algorithm"]:
            return False
        if (variant.draft_model_path or None) != g["draft_model_path"]:
            return False
        if bool(variant.uses_spec_v2) != bool(g["spec_v2"]):
            return False
        suffix = g["settings_suffix"]
        if suffix is None:
            if not self._same_settings(variant):
                return False
        elif variant.settings_suffix != suffix:
            return False
        return variant.resolved_num_steps is not None and variant.resolved_num_steps >= 1

    def _alphas(self, steps: int, topk: int, ndraft: int) -> tuple[np.ndarray, float]:
        """Accept lengths over the acceptance region (and gamma range); the central one."""
        acc = self._acc
        assert acc is not None
        depth = min(steps, ndraft - 1)
        if depth < 1:
            return np.array([1.0]), 1.0
        w = _width(steps, topk, ndraft)
        if w <= 1.0:
            alphas = 1.0 + _survival(acc.p, acc.r, 1.0, depth).sum(axis=-1)
            return alphas, float(alphas[acc.best])
        if topk in acc.gammas:
            gam = acc.gammas[topk]
            if not any(abs(w - m) < 1e-9 for m in acc.widths.get(topk, ())):
                # a width this top-k was not measured at: the power law is an assumption
                gam = np.concatenate([gam, np.clip(gam - 0.05, 0, 1), np.clip(gam + 0.05, 0, 1)])
            g = w**gam
            q1 = np.minimum(acc.p[:, None] * acc.r[:, None] ** np.arange(depth), 1.0)
            q1 = np.tile(q1, (gam.size // acc.p.size, 1))  # the first block: the fit's gamma
            surv = np.cumprod(1.0 - (1.0 - q1) ** g[:, None], axis=-1)
            alphas = 1.0 + surv.sum(axis=-1)
            return alphas, float(alphas[acc.best])
        grid = _survival(acc.p, acc.r, w ** np.array([0.0, 0.5, 1.0]), depth)
        alphas = 1.0 + grid.sum(axis=-1)  # (G, 3)
        return alphas.ravel(), float(alphas[acc.best, 1])

    def predict(self, variant: Variant, concurrency: int) -> Predicted | None:
        """Predicted output throughput of a variant at a level, or None if not covered."""
        base = self._base.get(int(concurrency))
        if base is None:
            return None
        if variant.is_baseline:
            return Predicted(base.thr, base.lo, base.hi, 1.0)
        if not self._covers(variant) or self._cost is None or self._acc is None:
            return None
        base_step = base.step_ms if base.step_ms > 0 else self._tb(base.batch)
        s = int(variant.resolved_num_steps or 0)
        k = int(variant.resolved_topk or 1)
        n = int(variant.resolved_num_draft_tokens or s + 1)
        mrr = variant.max_running_requests or self._mrr
        b = self._batch(int(concurrency), mrr)
        tb = self._tb(b)
        alphas, alpha_c = self._alphas(s, k, n)
        x = _features(s, k, n, b, self._cost.knee)
        excess = self._cost.vertices @ x
        ex_c = float(excess.mean())
        rate_b = base.batch / base_step
        a_map, beta = self._map.get(int(concurrency), (0.0, rate_b / base.thr))

        def thr(alpha: float, ex: float) -> float:
            rate = b * alpha / (tb + max(ex, 0.0))  # tokens per ms, the whole batch
            return 1.0 / (a_map + beta / rate)

        value = thr(alpha_c, ex_c)
        lo = thr(float(alphas.min()), float(excess.max()))
        hi = thr(float(alphas.max()), float(excess.min()))
        extra = 0.0
        if self._max_b > 0 and b > self._max_b:
            extra += _EXTRAP_B * math.log2(b / self._max_b)
        extra += _EXTRAP_DEPTH * max(0, min(s, n - 1) - self._acc.max_depth)
        e_model = math.sqrt(self._e_cost**2 + self._e_acc**2 + self._e_map**2)
        # the baseline's own noise, unless the level's map was fitted on three or more
        # measured points: then their scatter is in e_map and no one point carries it
        fitted = self._map_points.get(int(concurrency), 1) >= 3
        b_lo = 0.0 if fitted else (base.thr - base.lo) / base.thr
        b_hi = 0.0 if fitted else (base.hi - base.thr) / base.thr
        e_lo = math.sqrt(e_model**2 + b_lo**2 + extra**2)
        e_hi = math.sqrt(e_model**2 + b_hi**2 + extra**2)
        return Predicted(
            value=value,
            lo=min(lo, value) * max(1.0 - e_lo, 0.05),
            hi=max(hi, value) * (1.0 + e_hi),
            accept_length=alpha_c,
        )

    # -- describe -----------------------------------------------------------------------
    def describe(self) -> dict[str, object]:
        """The fitted parameters, readable and JSON-serialisable."""
        out: dict[str, object] = {
            "fit_on": list(self.fit_on),
            "baseline": {
                "variant": self._baseline_label,
                "step_ms_by_batch": {
                    str(int(b)) if float(b).is_integer() else str(b): round(float(t), 4)
                    for b, t in zip(self._tb_b, self._tb_t, strict=True)
                },
            },
            "covers": dict(self._group) if self._group else None,
            "max_running_requests": None if self._mrr is None else int(self._mrr),
        }
        if self._cost is not None:
            c = self._cost
            names = list(_COST_NAMES[: c.theta.size])
            out["cost"] = {
                **{name: round(float(v), 6) for name, v in zip(names, c.theta, strict=True)},
                "knee_tokens": c.knee,
                "ranges": {
                    name: [
                        round(float(c.vertices[:, i].min()), 6),
                        round(float(c.vertices[:, i].max()), 6),
                    ]
                    for i, name in enumerate(names)
                },
                "unidentified": [
                    name
                    for i, name in enumerate(names)
                    if c.vertices[:, i].max() - c.vertices[:, i].min() > 1e-9
                ],
                "rel_rms_residual": round(c.rel_rms, 5),
                "loo_rel_errors": [round(e, 5) for e in c.loo],
                "measured_steps": self._measured.get("steps"),
                "measured_topks": self._measured.get("topks"),
                "max_measured_batch": self._max_b,
                "points": self._measured.get("points"),
            }
        if self._acc is not None:
            a = self._acc
            out["acceptance"] = {
                "p": round(float(a.p[a.best]), 5),
                "r": round(float(a.r[a.best]), 5),
                "p_range": [round(float(a.p.min()), 5), round(float(a.p.max()), 5)],
                "r_range": [round(float(a.r.min()), 5), round(float(a.r.max()), 5)],
                "gamma": {
                    str(k): {
                        "best": round(float(g[a.best]), 4),
                        "range": [round(float(g.min()), 4), round(float(g.max()), 4)],
                    }
                    for k, g in sorted(a.gammas.items())
                },
                "source": a.source,
                "max_measured_depth": a.max_depth,
                "chi2_min": round(a.chi2_min, 3),
                "dof": a.dof,
            }
        out["errors"] = {
            "cost_rel95": round(self._e_cost, 5),
            "accept_rel95": self._e_acc,
            "throughput_map_rel95": round(self._e_map, 5),
        }
        out["throughput_map"] = {str(c): [a, b] for c, (a, b) in sorted(self._map.items())}
        return out
