"""Every word of a report figure's title block is inside the picture."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg

from specsweep.analysis.answer import analyze_run
from specsweep.report.plots import render_figures
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import baseline_tput, chain_row, level_row, write

RUN = "20261207T033747Z-d3906e"
LONG = {  # a real deployment's names: as long as the subtitle gets
    "model_path": "nvidia/Llama-3.3-70B-Instruct-FP8-dynamic-with-a-long-suffix",
    "gpu_name": "NVIDIA H200 141GB HBM3e",
    "gpu_count": 8,
    "simulated": True,
    "backend": "simulator",
}


def _answer(tmp_path, facts):
    store = ResultsStore(tmp_path)
    rows = []
    for c in (1, 2, 8):
        b = baseline_tput(c)
        rows.append(level_row(RUN, "baseline", c, b, **facts))
        for s in (1, 3, 5):
            rows.append(chain_row(RUN, s, c, b * (1.4 - 0.05 * s * c.bit_length()), **facts))
    write(store, rows)
    return analyze_run(store, RUN)


def _texts_outside(fig) -> list[tuple[str, float, float]]:
    """Each figure-level text (title, subtitle lines) that runs past the figure's edges."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    width, height = fig.bbox.width, fig.bbox.height
    out = []
    for text in [fig._suptitle, *fig.texts]:
        if text is None or not text.get_text():
            continue
        box = text.get_window_extent(renderer)
        if box.x0 < 0 or box.x1 > width or box.y0 < 0 or box.y1 > height:
            out.append((text.get_text(), box.x1, width))
    return out


def test_a_long_subtitle_wraps_inside_the_figure_and_says_everything(tmp_path):
    answer = _answer(tmp_path, LONG)
    figures = render_figures(answer)
    assert figures
    for name, fig in figures.items():
        assert _texts_outside(fig) == [], name
        said = " ".join(t.get_text() for t in fig.texts)
        for part in (LONG["model_path"], "8x NVIDIA H200 141GB HBM3e", RUN, "SIMULATED"):
            assert part in said.replace("\n", " "), (name, part, said)


def test_a_short_subtitle_stays_on_one_line(tmp_path):
    answer = _answer(tmp_path, {"model_path": "meta/llama"})
    for name, fig in render_figures(answer).items():
        assert _texts_outside(fig) == [], name
        assert all("\n" not in t.get_text() for t in fig.texts), name
