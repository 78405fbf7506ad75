"""The load-shape surface as one picture: a heatmap over shape (rows, the run's order) x
concurrency (columns). A cell's colour is the best variant's speedup over the baseline,
diverging around 1.0 (green: speculation pays; white: the baseline is best); its text is
the variant to run and that speedup with ± half its 95% interval. A near-tie is marked
``≈`` and outlined dashed; a cell not measured is grey.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Colormap, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from specsweep.analysis.answer import RunAnswer
from specsweep.report.figure import new_figure
from specsweep.report.shapes import answer_surface

CMAP = "PRGn"  # purple below 1.0 (speculation loses), green above: colour-blind safe
MISSING = "#d9d9d9"


def surface_figure(answer: RunAnswer) -> Figure:
    grid = answer_surface(answer)
    shapes, levels = grid.shapes, grid.levels
    values = np.array([[grid.speedup(s, c) for c in levels] for s in shapes], dtype=float)
    known = values[~np.isnan(values)]
    spread = max(0.1, float(np.max(np.abs(known - 1.0)))) if known.size else 0.1
    norm = TwoSlopeNorm(vcenter=1.0, vmin=1.0 - spread, vmax=1.0 + spread)
    width = min(13.0, max(9.0, 1.6 + 1.25 * len(levels)))  # 9: the subtitle fits
    height = 2.3 + 0.8 * len(shapes)  # a cell holds up to three lines
    fig = new_figure(
        answer.first,
        "Best variant and its speedup, per load shape and concurrency",
        size=(width, height),
        shapes=answer.shapes,
    )
    ax = fig.add_subplot()
    masked = np.ma.masked_invalid(values)
    image = ax.imshow(masked, cmap=_cmap(), norm=norm, aspect="auto")
    for i, shape in enumerate(shapes):
        for j, c in enumerate(levels):
            value = values[i, j]
            text = grid.cell_text(shape, c, sep="\n")
            dark = not math.isnan(value) and abs(norm(value) - 0.5) > 0.33
            ax.text(
                j, i, text, ha="center", va="center", fontsize=7, linespacing=1.15,
                color="white" if dark else "#222222",
                fontweight="bold" if not math.isnan(value) and value > 1.0 else "normal",
            )  # fmt: skip
            if grid.tie(shape, c):
                ax.add_patch(
                    Rectangle(
                        (j - 0.47, i - 0.47), 0.94, 0.94, fill=False, linestyle="--",
                        linewidth=1.2, edgecolor="#333333",
                    )
                )  # fmt: skip
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_yticks(range(len(shapes)), shapes)
    ax.tick_params(labelsize=9, length=0)
    ax.set_xlabel("concurrency (concurrent streams)", fontsize=10)
    ax.set_ylabel("load shape (input-output tokens)", fontsize=10)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xticks(np.arange(-0.5, len(levels)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(shapes)), minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="minor", length=0)
    bar = fig.colorbar(image, ax=ax, shrink=0.9, pad=0.02)
    bar.set_label("best / baseline throughput", fontsize=9)
    bar.ax.tick_params(labelsize=8)
    bar.ax.yaxis.set_major_formatter(lambda v, _: f"{v:.2f}x")
    note = "≈ dashed: near-tie, the simplest shown (with the best's speedup)"
    if grid.prefix:
        note += f"; names without {grid.prefix!r}"
    if np.isnan(values).any():
        note += "; grey: not measured"
    ax.set_title(note, fontsize=8, color="#555555", loc="left")
    return fig


def _cmap() -> Colormap:
    return colormaps[CMAP].with_extremes(bad=MISSING)
