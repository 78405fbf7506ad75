"""What every report figure shares: the axes style, the title and the subtitle that says
what was measured (model, GPUs, load shape and workload, run), and the PNG encodings: the
report's, and a smaller one to embed in a page (a Prefect artifact) as a data: URI."""

from __future__ import annotations

import io

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from specsweep.analysis.answer import CellAnswer
from specsweep.report.evidence import load_text

DPI = 150
# Embedded in a Markdown page, a figure is shown at most ~880 px wide (the Prefect UI's
# artifact column at a 1440-px window): drawn at that size and reduced to 256 colours
# (lines, bands and text need no more), a plot is ~40 KB instead of ~180 KB.
INLINE_DPI = 110
INLINE_COLORS = 256
SEPARATOR = "  ·  "  # between the subtitle's parts, and where a long one breaks
SUBTITLE_LINE_IN = 0.16  # each further subtitle line moves the axes down (8.5 pt text)


def style(ax: Axes) -> None:
    ax.grid(True, which="major", color="#dddddd", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(labelsize=9)


def subtitle(answer: CellAnswer, shapes: list[str] | None = None) -> str:
    """Model, GPUs, load (the cell's shape and workload; `shapes`: the run's shapes, for a
    figure over them), run id, and SIMULATED when it was."""
    facts = answer.facts()
    parts = [facts.get("model_path", "")]
    gpu = facts.get("gpu_name")
    if gpu:
        parts.append(f"{facts.get('gpu_count', '?')}x {gpu}")
    if shapes is None:
        if answer.shape is None and "input_len" in facts:  # rows from before load shapes
            parts.append(f"in/out {facts['input_len']}/{facts.get('output_len', '?')} tokens")
        parts.append(load_text(answer.levels, answer.shape) or "")
    else:
        sent = load_text(answer.levels, "")  # "": the workload alone, not the first shape
        parts.append(f"{len(shapes)} load shapes" + (f", {sent}" if sent else ""))
    parts.append(f"run {answer.run_id}")
    if answer.simulated:
        parts.append("SIMULATED server")
    return SEPARATOR.join(p for p in parts if p)


def new_figure(
    answer: CellAnswer,
    title: str,
    size: tuple[float, float] = (8.0, 4.8),
    shapes: list[str] | None = None,
) -> Figure:
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    height = size[1]  # place title and subtitle in inches from the top, whatever the size
    fig.suptitle(title, fontsize=13, fontweight="bold", x=0.01, y=1 - 0.08 / height, ha="left")
    text = fig.text(0.01, 1 - 0.36 / height, "", fontsize=8.5, color="#555555", va="top")
    lines = _wrapped(text, subtitle(answer, shapes).split(SEPARATOR), size[0] * 0.98 * DPI)
    text.set_text("\n".join(lines))
    top = 0.62 + SUBTITLE_LINE_IN * (len(lines) - 1)
    fig.get_layout_engine().set(rect=(0, 0, 1, 1 - top / height))
    return fig


def _wrapped(text: Text, parts: list[str], width_px: float) -> list[str]:
    """The subtitle's parts on as few lines as fit `width_px` (measured as drawn), broken
    only between parts: a long model name or GPU ran past the figure's right edge."""
    renderer = RendererAgg(1, 1, DPI)  # measures text only; draws nothing

    def fits(line: str) -> bool:
        text.set_text(line)
        return text.get_window_extent(renderer).width <= width_px

    lines: list[str] = []
    for part in parts:
        if lines and fits(lines[-1] + SEPARATOR + part):
            lines[-1] += SEPARATOR + part
        else:
            lines.append(part)
    return lines


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


def inline_png(drawn: bytes) -> bytes:
    """The figure's PNG (drawn at DPI) reduced to INLINE_DPI as a palette PNG: small enough
    to travel inside a page. Resampled from the drawing rather than drawn again: a second
    drawing cost more CPU than the first (about 1.9 s per report of five figures).

    The palette is a fast octree's: it keeps a plot's flat colours within a few levels of
    255 (median cut, Pillow's default for RGB, spent the palette on the pale bands' blends
    and drew the speedup plot's green and red labels grey and brown) in a tenth of the
    time; zlib's `optimize` pass cost five times the save for 2% of the bytes."""
    from PIL import Image  # matplotlib's own image dependency

    image = Image.open(io.BytesIO(drawn)).convert("RGB")
    size = (round(image.width * INLINE_DPI / DPI), round(image.height * INLINE_DPI / DPI))
    small = image.resize(size, Image.Resampling.LANCZOS)
    image = small.quantize(INLINE_COLORS, method=Image.Quantize.FASTOCTREE)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
