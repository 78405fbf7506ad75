"""The report's figures, as PNG bytes: matplotlib's Agg canvas, no pyplot global state.

One colour per variant across every figure (baseline black and thicker),
concurrency on a log2 axis labelled with the measured levels, and the pivots
marked where they are read off: on the speedup = 1 line. Where the levels carry 95%
intervals, each curve has a shaded band (throughput: the levels' intervals; speedup:
the ratio's), a crossing's 95% range is a shaded vertical span, and an inconclusive
pivot a hatched one over the bracket it lies in. Levels without intervals draw as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, NullLocator

from specsweep.analysis.answer import CellAnswer, RunAnswer
from specsweep.analysis.levels import baseline_name, interval_tables, metric_table
from specsweep.analysis.pivot import Pivot, ratio_intervals
from specsweep.report.figure import new_figure as _figure
from specsweep.report.figure import png as _png
from specsweep.report.figure import style as _style
from specsweep.report.surface_plot import surface_figure

# Okabe-Ito, colour-blind safe; black is kept for the baseline.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442"]
BASELINE_COLOR = "#111111"
PAYS_COLOR, LOSES_COLOR = "#e8f4ea", "#fbeaea"
BAND_ALPHA, SPAN_ALPHA = 0.18, 0.14


def _log2_x(ax: Axes, levels: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(levels))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(c) for c in levels])
    if levels:
        ax.set_xlim(levels[0] / 1.25, levels[-1] * 1.25)
    ax.set_xlabel("concurrency (concurrent streams, log2 scale)", fontsize=10)


def colors(variants: list[str], baseline: str | None) -> dict[str, str]:
    spec = [v for v in variants if v != baseline]
    out = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(spec)}
    if baseline is not None:
        out[baseline] = BASELINE_COLOR
    return out


def _line_style(variant: str, baseline: str | None, color: str) -> dict:
    if variant == baseline:
        return {"color": color, "linewidth": 2.8, "marker": "s", "markersize": 5.5, "zorder": 5}
    return {"color": color, "linewidth": 1.7, "marker": "o", "markersize": 4.5, "zorder": 3}


def _legend(ax: Axes, extra: list[Patch] | None = None, **kw) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for patch in extra or []:
        handles.append(patch)
        labels.append(patch.get_label())
    if extra:  # bands and spans may run behind the legend: keep it readable
        kw |= {"frameon": True, "facecolor": "white", "edgecolor": "none", "framealpha": 0.85}
    else:
        kw.setdefault("frameon", False)
    ax.legend(handles, labels, fontsize=8.5, **kw)


def _pivot_label(answer: CellAnswer, variant: str) -> str:
    pivot = answer.pivots.get(variant)
    if pivot is None:
        return variant
    if pivot.kind == "crosses":
        short = f"pivot c≈{pivot.concurrency:.3g}" if pivot.concurrency else ""
        if pivot.low is not None and pivot.high is not None:
            short += f", 95% {pivot.low:.3g} to {pivot.high:.3g}"
    elif pivot.kind == "inconclusive":
        short = "pivot between levels"
        if pivot.suggest is not None:
            short += f": add c={pivot.suggest}"
    else:
        short = {
            "never": "never below baseline",
            "always": "below baseline everywhere",
            "below_at_low": "below baseline at low c",
        }[pivot.kind]
    return f"{variant}  ({short})"


def _band(ax: Axes, mid: pd.Series, lo: pd.Series, hi: pd.Series, color: str) -> bool:
    """Shade lo..hi around a curve where both ends are known; whether anything was drawn."""
    lo, hi = lo.reindex(mid.index), hi.reindex(mid.index)
    known = lo.notna() & hi.notna() & mid.notna()
    if not known.any():
        return False
    x = np.asarray(mid.index[known], dtype=float)
    if len(x) == 1:  # one level: a band needs two, a bar shows the interval
        ax.vlines(x, lo[known], hi[known], color=color, linewidth=5, alpha=0.35, zorder=2)
        return True
    ax.fill_between(
        x, lo[known].to_numpy(), hi[known].to_numpy(), color=color, alpha=BAND_ALPHA,
        linewidth=0, zorder=2,
    )  # fmt: skip
    return True


def _pivot_span(ax: Axes, pivot: Pivot, color: str, levels: list[int], y: float) -> bool:
    """A crossing's 95% range shaded; an inconclusive pivot's bracket hatched and labelled.

    y: the label's bottom in axes fraction (near the bottom: the legends sit at the top).
    Whether anything was drawn."""
    left, right = levels[0] / 1.25, levels[-1] * 1.25  # the x limits _log2_x sets
    if pivot.kind == "crosses" and pivot.low is not None and pivot.high is not None:
        ax.axvspan(pivot.low, pivot.high, color=color, alpha=SPAN_ALPHA, linewidth=0, zorder=1)
        return True
    if pivot.kind != "inconclusive":
        return False
    low = pivot.low if pivot.low is not None else left
    high = pivot.high if pivot.high is not None else right
    ax.axvspan(
        low, high, facecolor="none", edgecolor=color, hatch="//", alpha=0.4, linewidth=0.8,
        zorder=1,
    )  # fmt: skip
    text = "crosses here" + (f": add c={pivot.suggest}" if pivot.suggest is not None else "")
    ax.text(
        math.sqrt(low * high), y, text, ha="center", va="bottom", fontsize=8, color=color,
        transform=ax.get_xaxis_transform(), zorder=4,  # under the legend (5)
        bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
    )  # fmt: skip
    return True


def _evidence_handles(band: bool, span: bool, hatch: bool) -> list[Patch]:
    """Legend entries for what the bands and spans mean (only those drawn)."""
    out = []
    if band:
        out.append(Patch(facecolor="#888888", alpha=BAND_ALPHA * 2, label="95% interval"))
    if span:
        out.append(Patch(facecolor="#888888", alpha=SPAN_ALPHA * 2, label="pivot's 95% range"))
    if hatch:
        out.append(
            Patch(
                facecolor="none",
                edgecolor="#555555",
                hatch="//",
                label="pivot between levels (within noise)",
            )
        )
    return out


def throughput_figure(answer: CellAnswer) -> Figure:
    """Output throughput per variant vs concurrency; pivots marked on the baseline curve,
    with the levels' 95% intervals as bands and the pivots' ranges as spans."""
    table = answer.throughput
    base = baseline_name(answer.levels)
    palette = colors(list(table.columns), base)
    fig = _figure(answer, "Output throughput vs concurrency")
    ax = fig.add_subplot()
    _style(ax)
    levels = [int(c) for c in table.index]
    lo, hi = interval_tables(answer.levels, "output_throughput")
    banded = False
    for variant in table.columns:
        series = table[variant].dropna()
        label = f"{variant} (no speculation)" if variant == base else _pivot_label(answer, variant)
        ax.plot(
            series.index,
            series.to_numpy(),
            label=label,
            **_line_style(variant, base, palette[variant]),
        )
        if variant in lo.columns:
            banded |= _band(ax, series, lo[variant], hi[variant], palette[variant])
    spans = _pivot_spans(ax, answer, palette, levels) if levels else (False, False)
    if base is not None:
        baseline = table[base].dropna()
        for variant, pivot in answer.pivots.items():
            if pivot.kind != "crosses" or pivot.concurrency is None:
                continue
            y = float(
                np.interp(
                    math.log2(pivot.concurrency), np.log2(baseline.index), baseline.to_numpy()
                )
            )
            ax.plot(
                [pivot.concurrency],
                [y],
                marker="D",
                markersize=8,
                markerfacecolor="white",
                markeredgecolor=palette[variant],
                markeredgewidth=2,
                zorder=6,
            )
        if any(p.kind == "crosses" for p in answer.pivots.values()):
            ax.plot(
                [],
                [],
                marker="D",
                linestyle="none",
                markerfacecolor="white",
                markeredgecolor="#555555",
                markeredgewidth=2,
                label="pivot: speculation stops paying",
            )
    _log2_x(ax, levels)
    ax.set_ylabel("output throughput (tok/s)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    _legend(ax, _evidence_handles(banded, *spans), loc="upper left")
    return fig


def _pivot_spans(
    ax: Axes, answer: CellAnswer, palette: dict[str, str], levels: list[int]
) -> tuple[bool, bool]:
    """Every pivot's span; (any crossing range drawn, any inconclusive bracket drawn)."""
    ranged = hatched = False
    inconclusive = 0
    for variant, pivot in answer.pivots.items():
        y = 0.03 + 0.07 * inconclusive  # stack the labels of several inconclusive pivots
        drawn = _pivot_span(ax, pivot, palette.get(variant, "#888888"), levels, y)
        if drawn and pivot.kind == "inconclusive":
            hatched, inconclusive = True, inconclusive + 1
        elif drawn:
            ranged = True
    return ranged, hatched


def speedup_figure(answer: CellAnswer) -> Figure:
    """Throughput relative to the baseline; shaded where speculation pays or loses."""
    table = answer.throughput
    base = baseline_name(answer.levels)
    fig = _figure(answer, "Speedup over the baseline (output throughput ratio)")
    ax = fig.add_subplot()
    _style(ax)
    levels = [int(c) for c in table.index]
    _log2_x(ax, levels)
    if base is None or base not in table.columns:
        ax.text(0.5, 0.5, "no baseline measured", ha="center", transform=ax.transAxes)
        return fig
    palette = colors(list(table.columns), base)
    ratios = table.drop(columns=[base]).div(table[base], axis=0)
    spread = answer.levels  # CVs come per level: error bars where repeats exist
    cvs = metric_table(spread.assign(cv=spread["output_throughput_cv"]), "cv")
    _, r_lo, r_hi = ratio_intervals(answer.levels)  # bands where the levels have intervals
    lows = np.concatenate([ratios.to_numpy().ravel(), r_lo.to_numpy(dtype=float).ravel()])
    highs = np.concatenate([ratios.to_numpy().ravel(), r_hi.to_numpy(dtype=float).ravel()])
    highs = highs[np.isfinite(highs)]  # an unbounded interval runs to the top edge
    lo = min(0.9, float(np.nanmin(lows)) - 0.05) if ratios.size else 0.5
    hi = max(1.1, float(np.nanmax(highs)) + 0.05) if highs.size else 1.5
    r_hi = r_hi.clip(upper=hi)
    ax.axhspan(1.0, hi, color=PAYS_COLOR, zorder=0)
    ax.axhspan(lo, 1.0, color=LOSES_COLOR, zorder=0)
    ax.axhline(1.0, color=BASELINE_COLOR, linewidth=2.2, label=f"{base} = 1.0")
    ax.text(
        levels[-1] * 1.2,
        hi - 0.01,
        "speculation pays",
        ha="right",
        va="top",
        fontsize=8.5,
        color="#2e7d32",
    )
    ax.text(
        levels[-1] * 1.2,
        lo + 0.01,
        "speculation loses",
        ha="right",
        va="bottom",
        fontsize=8.5,
        color="#c62828",
    )
    banded = False
    for variant in ratios.columns:
        series = ratios[variant].dropna()
        band = False
        if variant in r_lo.columns:
            band = _band(ax, series, r_lo[variant], r_hi[variant], palette[variant])
            banded |= band
        err = None
        if not band and variant in cvs.columns and base in cvs.columns:
            err = series * np.hypot(cvs[variant], cvs[base]).reindex(series.index)
            err = None if err.isna().all() else err.fillna(0).to_numpy()
        ax.errorbar(
            series.index,
            series.to_numpy(),
            yerr=err,
            capsize=3,
            label=_pivot_label(answer, variant),
            **_line_style(variant, base, palette[variant]),
        )
        pivot = answer.pivots.get(variant)
        if pivot is not None and pivot.kind == "crosses":
            ax.plot(
                [pivot.concurrency],
                [1.0],
                marker="D",
                markersize=8,
                zorder=6,
                markerfacecolor="white",
                markeredgecolor=palette[variant],
                markeredgewidth=2,
            )
    spans = _pivot_spans(ax, answer, palette, levels)
    ax.set_ylim(lo, hi)
    ax.set_ylabel("throughput / baseline throughput", fontsize=10)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:.2f}x")
    _legend(ax, _evidence_handles(banded, *spans), loc="upper right", bbox_to_anchor=(1.0, 0.93))
    return fig


def latency_figure(answer: CellAnswer) -> Figure:
    """TTFT and ITL, p50 and p99, per variant; the SLO limits drawn on the p99 panels."""
    base = baseline_name(answer.levels)
    fig = _figure(answer, "Latency vs concurrency", size=(8.0, 6.6))
    axes = fig.subplots(2, 2, sharex=True)
    slo = answer.slo if answer.slo is not None and answer.slo.active else None
    panels = [
        ("ttft_ms_p50", "TTFT p50 (ms)", None),
        ("ttft_ms_p99", "TTFT p99 (ms)", slo.ttft_p99_ms if slo else None),
        ("itl_ms_p50", "ITL p50 (ms)", None),
        ("itl_ms_p99", "ITL p99 (ms)", slo.itl_p99_ms if slo else None),
    ]
    levels = [int(c) for c in answer.throughput.index]
    palette = colors(list(answer.throughput.columns), base)
    for ax, (metric, label, limit) in zip(axes.flat, panels, strict=True):
        _style(ax)
        table = metric_table(answer.levels, metric)
        for variant in table.columns:
            series = table[variant].dropna()
            ax.plot(
                series.index,
                series.to_numpy(),
                label=variant,
                **_line_style(variant, base, palette.get(variant, "#888888")),
            )
        if limit is not None:
            ax.axhline(limit, color="#c62828", linestyle="--", linewidth=1.3, label="SLO limit")
        _log2_x(ax, levels)
        ax.set_title(label, fontsize=10.5, loc="left")
        ax.set_ylabel("ms", fontsize=9)
        ax.set_ylim(bottom=0)
    for ax in axes[0]:
        ax.set_xlabel("")
    handles, labels = axes.flat[-1].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=min(len(labels), 4),
        fontsize=8.5,
        frameon=False,
    )
    return fig


def accept_length_figure(answer: CellAnswer) -> Figure:
    """Mean accepted tokens per verify step per variant, against its draft-token ceiling."""
    table = answer.accept_length()
    fig = _figure(answer, "Accept length per speculative variant", size=(8.0, 4.4))
    ax = fig.add_subplot()
    _style(ax)
    ax.grid(False, axis="x")
    if table.empty:
        ax.text(0.5, 0.5, "no speculative variant measured", ha="center", transform=ax.transAxes)
        return fig
    base = baseline_name(answer.levels)
    palette = colors(list(answer.throughput.columns), base)
    ceilings = answer.levels.drop_duplicates("variant").set_index("variant")["num_draft_tokens"]
    x = np.arange(len(table.columns))
    means = table.mean().to_numpy()
    bars = ax.bar(x, means, width=0.6, color=[palette.get(v, "#888888") for v in table.columns])
    # The range over levels, drawn by hand: errorbar's 2xN yerr trips a NumPy deprecation.
    lows, highs = table.min().to_numpy(), table.max().to_numpy()
    ax.vlines(x, lows, highs, color="#444444", linewidth=1.2, zorder=4)
    for edge in (lows, highs):
        ax.hlines(edge, x - 0.06, x + 0.06, color="#444444", linewidth=1.2, zorder=4)
    for rect, mean in zip(bars, means, strict=True):
        ax.annotate(
            f"{mean:.2f}",
            (rect.get_x() + rect.get_width() / 2, mean),
            xytext=(0, -14),
            textcoords="offset points",
            ha="center",
            fontsize=9,
            fontweight="bold",
            color="white",
        )
    for i, variant in enumerate(table.columns):
        ceiling = ceilings.get(variant)
        if ceiling is not None and pd.notna(ceiling):
            ax.hlines(ceiling, i - 0.36, i + 0.36, color="#444444", linestyle=":", linewidth=1.5)
    ax.plot([], [], color="#444444", linestyle=":", label="ceiling: draft tokens verified per step")
    ax.plot(
        [], [], color="#444444", marker="|", linestyle="none", label="range over concurrency levels"
    )
    ax.set_xticks(x, list(table.columns), fontsize=8.5)
    ax.set_ylabel("accepted tokens per verify step", fontsize=10)
    ax.set_ylim(
        0,
        max(
            float(
                np.nanmax(ceilings.to_numpy(dtype=float, na_value=np.nan))
                if ceilings.notna().any()
                else 0
            ),
            float(np.nanmax(means)),
        )
        * 1.18,
    )
    _legend(ax, loc="upper left")
    return fig


def hosts_figure(answer: CellAnswer) -> Figure:
    """Per level measured on several targets: each target's throughput / the fastest's."""
    hc = answer.hosts
    assert hc is not None and not hc.cells.empty
    cells = hc.cells
    keys = list(dict.fromkeys(zip(cells["variant"], cells["concurrency"], strict=True)))
    x = {key: i for i, key in enumerate(keys)}
    fig = _figure(answer, "Throughput per target, relative to the fastest", size=(8.0, 4.6))
    ax = fig.add_subplot()
    _style(ax)
    targets = list(hc.hosts["target"])
    lo = min(0.9, float(cells["ratio"].min()) - 0.03)
    slow_band = 1 - hc.min_difference
    ax.axhspan(lo, slow_band, color=LOSES_COLOR, zorder=0)
    ax.axhline(1.0, color=BASELINE_COLOR, linewidth=1.2)
    for i, target in enumerate(targets):
        mine = cells[cells["target"] == target]
        xs = [x[k] for k in zip(mine["variant"], mine["concurrency"], strict=True)]
        ratio = float(hc.hosts.loc[hc.hosts["target"] == target, "median_ratio"].iloc[0])
        label = f"{target} (median {ratio:.3f})" if not math.isnan(ratio) else str(target)
        ax.plot(
            xs,
            mine["ratio"].to_numpy(),
            linestyle="none",
            marker="os^Dv"[i % 5],
            markersize=6,
            color=PALETTE[i % len(PALETTE)],
            label=label,
            zorder=3,
        )
    band = f"more than {hc.min_difference:.0%} slower"
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=LOSES_COLOR, edgecolor="#d8a8a8", label=band))
    ax.set_xticks(range(len(keys)), [f"{v} c={c}" for v, c in keys], rotation=60, ha="right")
    ax.tick_params(axis="x", labelsize=7 if len(keys) > 12 else 8.5)
    ax.set_xlim(-0.6, len(keys) - 0.4)
    ax.set_ylim(lo, 1.03)
    ax.set_ylabel("output throughput / fastest target", fontsize=10)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:.2f}x")
    _legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


PREDICTED_CURVES = 6  # the not-launched variants drawn: the closest to the measured best


def predictions_figure(answer: CellAnswer) -> Figure:
    """The search's predicted curves (dashed, with their 95% band) for the variants it did
    not launch, beside the measured best per level and the measured baseline (solid): what
    the search ruled out, never drawn like a measurement."""
    view = answer.search
    ranked = view.not_launched()
    shown = list(ranked["variant"].head(PREDICTED_CURVES))
    curves = view.not_launched_predictions()
    title = "Predicted (not measured): variants the search did not launch"
    fig = _figure(answer, title)
    ax = fig.add_subplot()
    _style(ax)
    best = answer.best.set_index("concurrency")["best_throughput"].dropna()
    levels = sorted({int(c) for c in best.index} | {int(c) for c in curves["concurrency"]})
    ax.plot(
        best.index, best.to_numpy(), color=BASELINE_COLOR, linewidth=2.6, marker="o",
        markersize=5, zorder=5, label="measured best (per level)",
    )  # fmt: skip
    base = baseline_name(answer.levels)
    if base is not None and base in answer.throughput.columns:
        baseline = answer.throughput[base].dropna()
        ax.plot(
            baseline.index, baseline.to_numpy(), color="#777777", linewidth=1.4, marker="s",
            markersize=3.5, zorder=4, label=f"measured {base} (no speculation)",
        )  # fmt: skip
    palette = colors(shown, None)
    for variant in shown:
        mine = curves[curves["variant"] == variant].set_index("concurrency").sort_index()
        mid = mine["predicted_output_throughput"].astype(float)
        ratio = ranked.loc[ranked["variant"] == variant, "best_ratio"].iloc[0]
        label = f"{variant}, predicted" + (
            "" if pd.isna(ratio) else f" (at most {ratio:.2f}x of the measured best)"
        )
        ax.plot(
            mid.index, mid.to_numpy(), color=palette[variant], linewidth=1.5, linestyle="--",
            marker="o", markersize=3.5, markerfacecolor="white", zorder=3, label=label,
        )  # fmt: skip
        lo, hi = mine["predicted_lo"].astype(float), mine["predicted_hi"].astype(float)
        _band(ax, mid, lo, hi, palette[variant])
    extra = [Patch(facecolor="#888888", alpha=BAND_ALPHA * 2, label="95% prediction interval")]
    if len(ranked) > len(shown):
        ax.text(
            0.99, 0.02, f"{len(shown)} of {len(ranked)} not launched shown: the closest to "
            "the measured best", transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
            color="#555555",
        )  # fmt: skip
    _log2_x(ax, levels)
    ax.set_ylabel("output throughput (tok/s)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    _legend(ax, extra, loc="upper left")
    return fig


def _first(draw: Callable[[CellAnswer], Figure]) -> Callable[[RunAnswer], Figure]:
    """A figure of one cell, drawn for the run's first cell (the one the report opens with)."""
    return lambda answer: draw(answer.first)


FIGURES: dict[str, tuple[str, Callable[[RunAnswer], Figure]]] = {
    "throughput": ("Output throughput vs concurrency", _first(throughput_figure)),
    "speedup": ("Speedup over the baseline", _first(speedup_figure)),
    "latency": ("Latency (TTFT, ITL) vs concurrency", _first(latency_figure)),
    "accept_length": ("Accept length per variant", _first(accept_length_figure)),
    "hosts": ("Throughput per target, relative to the fastest", _first(hosts_figure)),
    "predictions": (
        "Predicted (not measured): variants not launched",
        _first(predictions_figure),
    ),
    "surface": ("Best variant and its speedup per load shape and concurrency", surface_figure),
}
HOST_FIGURES = {"hosts"}  # drawn in the report's Hosts section, and only for several targets
SEARCH_FIGURES = {"predictions"}  # drawn in the Search section, for a search's final predictions
SHAPE_FIGURES = {"surface"}  # drawn in the Load shapes section, for a run of several shapes
APART = HOST_FIGURES | SEARCH_FIGURES | SHAPE_FIGURES  # not among the first shape's plots


def render_plots(answer: RunAnswer) -> dict[str, bytes]:
    """Every figure that applies, as PNG bytes keyed by FIGURES' names."""
    return {name: _png(fig) for name, fig in render_figures(answer).items()}


def render_figures(answer: RunAnswer) -> dict[str, Figure]:
    """Every figure that applies, keyed by FIGURES' names, to encode once or twice."""
    one = answer.first
    if one.throughput.empty:
        return {}
    shared = one.hosts is not None and not one.hosts.cells.empty
    predicted = one.has_search and not one.search.not_launched().empty
    shapes = answer.multi_shape and not answer.surface.empty
    wanted = {
        name
        for name in FIGURES
        if (name not in HOST_FIGURES or shared)
        and (name not in SEARCH_FIGURES or predicted)
        and (name not in SHAPE_FIGURES or shapes)
    }
    return {name: make(answer) for name, (_, make) in FIGURES.items() if name in wanted}
