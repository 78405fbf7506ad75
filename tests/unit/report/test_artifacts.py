"""The answer and report as Prefect artifact pages: plots inside the page as data: URIs,
no file:// link, every caveat on the numbers said, tables fitted to the UI's column; the
results table one row per level and metric; the run summary as plain text for a log."""

from __future__ import annotations

import base64
import io
import json
import logging
import re

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from PIL import Image

from specsweep.analysis.answer import analyze
from specsweep.analysis.summary import summarize
from specsweep.report import caveats
from specsweep.report.artifacts import (
    TABLE_PX,
    answer_page,
    cell_px,
    column_px,
    fit_tables,
    level_rows,
    report_page,
)
from specsweep.report.figure import INLINE_DPI
from specsweep.report.markdown import TEXT_WIDTH, Grid, summary_markdown, summary_text, text_table
from specsweep.report.plots import BASELINE_COLOR, LOSES_COLOR, PALETTE, PAYS_COLOR
from specsweep.report.render import (
    answer_markdown,
    default_report_dir,
    level_records,
    write_report,
)
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import baseline_tput, chain_row, level_row, write

RUN = "20261106T000000Z-artifacts"
STEPS = (1, 2, 3, 5, 7)  # six variants with intervals: a throughput table too wide as is
SIM = {
    "simulated": True,
    "backend": "simulator",
    "env": json.dumps({"SPECSWEEP_SIM_TIME_SCALE": "0.2"}),
}
TIME_SCALE = "SPECSWEEP_SIM_TIME_SCALE=0.2 compresses simulated time"
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]*)\)")
SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$", re.M)


def _interval(value: float, rel: float) -> dict[str, float]:
    return {"output_throughput_lo": value * (1 - rel), "output_throughput_hi": value * (1 + rel)}


def sim_rows() -> list[dict]:
    rows = []
    for c in (1, 2, 4, 8, 16, 32):
        b = baseline_tput(c)
        rows.append(level_row(RUN, "baseline", c, b, **SIM, **_interval(b, 0.02)))
        for s in STEPS:
            t = b * (1.3 - 0.02 * s * (1 + c.bit_length()))
            rows.append(chain_row(RUN, s, c, t, **SIM, **_interval(t, 0.03)))
    return rows


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultsStore:
    store = ResultsStore(tmp_path_factory.mktemp("artifacts"))
    write(store, sim_rows())
    return store


@pytest.fixture(scope="module")
def answer(store):
    from specsweep.analysis.answer import analyze_run

    return analyze_run(store, RUN)


@pytest.fixture(scope="module")
def files(store, answer):
    return write_report(answer, default_report_dir(store.root, RUN), inline=True)


def images(page: str) -> dict[str, bytes]:
    """Each image of a page, by its alt text: its bytes, decoded from a PNG data: URI."""
    out = {}
    for alt, uri in IMAGE.findall(page):
        assert uri.startswith("data:image/png;base64,"), uri[:60]
        out[alt] = base64.b64decode(uri.removeprefix("data:image/png;base64,"), validate=True)
    return out


def test_the_answer_page_shows_its_key_plot_as_a_png_inside_the_page(answer, files):
    page = answer_page(answer, files, None, "specsweep-report")
    shown = images(page)
    assert list(shown) == ["Speedup over the baseline"]
    picture = Image.open(io.BytesIO(shown["Speedup over the baseline"]))
    assert picture.format == "PNG" and picture.width == 8 * INLINE_DPI  # an 8-inch figure
    assert "file://" not in page
    # the path, as text: not a link (a long path in code spans cut where it may wrap)
    assert f"`{files.html.resolve()}` on " in page.replace("`<wbr>`", "")
    assert "this run's `specsweep-report` artifact" in page


def test_the_report_page_embeds_every_plot_and_links_the_html_only_when_served(answer, files):
    page = report_page(answer, files)
    shown = images(page)
    assert len(shown) == len(files.plots) >= 4  # throughput, speedup, latency, accept length
    for data in shown.values():
        assert Image.open(io.BytesIO(data)).format == "PNG"
    assert "file://" not in page and "](http" not in page
    assert sum(len(d) for d in files.inline.values()) < 0.5 * sum(
        p.stat().st_size for p in files.plots.values()
    )  # the embedded plots are the small ones
    served = report_page(answer, files, "https://ci.example/results/reports/r/report.html")
    assert "[report.html](https://ci.example/results/reports/r/report.html)" in served
    assert files.markdown.read_text().count("](plots/") == len(files.plots)  # the file's own


def test_every_caveat_the_cli_says_is_on_the_pages(store, answer, files):
    note = caveats.simulated_note(answer.first.levels)
    assert note is not None and TIME_SCALE in note
    from specsweep.cli import common

    assert common.simulated_note is caveats.simulated_note  # one wording, the CLI's
    said = caveats.sentence(note)
    assert said in answer_page(answer, files)
    assert said in report_page(answer, files)
    summary = summarize(store.read_levels(RUN))
    assert said in summary_markdown(RUN, summary, {})
    assert said in summary_text(RUN, summary, {})
    memory = "GPU memory on gpu-host: 2,048 MiB in use before the sweep, 0 MiB after"
    assert memory in answer_page(answer, files, notes=[memory])


def test_levels_above_the_servers_cap_and_random_ids_are_said():
    rows = [
        level_row(RUN, v, c, 100.0 * c, max_running_requests=8, workload="random-ids")
        for v in ("baseline", "eagle3-s2-k1-d3")
        for c in (4, 8, 16, 32)
    ]
    for row in rows[4:]:
        row["algorithm"] = "EAGLE3"
    for row in rows[:4]:
        row["algorithm"] = None
    from tests.synthetic_levels import frame

    levels = frame(rows)
    queue = caveats.queue_note(levels)
    assert queue is not None and "max_running_requests 8 (c=16, 32)" in queue
    ids = caveats.random_ids_note(levels)
    assert ids is not None and "understated" in ids
    text = answer_markdown(analyze(levels, RUN))
    assert caveats.sentence(queue) in text and caveats.sentence(ids) in text
    calm = frame([level_row(RUN, "baseline", 4, 400.0, max_running_requests=8)])
    assert caveats.level_notes(calm) == []


def test_the_pages_tables_fit_the_ui_column(answer, files):
    wide = answer_markdown(answer)
    before = [t for t in _tables(wide) if sum(column_px(t)) > TABLE_PX]
    assert before, "the fixture must have a table too wide for the column"
    for page in (answer_page(answer, files), report_page(answer, files)):
        for table in _tables(page):
            assert sum(column_px(table)) <= TABLE_PX, table[0]


def test_fitting_wraps_then_splits_and_loses_no_cell():
    header = ["concurrency", *(f"eagle3-s{s}-k1-d{s + 1}" for s in range(1, 9)), "why"]
    rows = [
        [str(c), *(f"≈ {1000 * c + s:,.1f} ±{s}.5%" for s in range(1, 9)), "word " * 30]
        for c in (1, 2, 4)
    ]
    table = "\n".join(
        [
            "| " + " | ".join(header) + " |",
            "|" + "---:|" * 9 + "---|",
            *("| " + " | ".join(r) + " |" for r in rows),
        ]
    )
    text = f"### Title\n\n{table}\n\nafter\n"
    fitted = fit_tables(text)
    parts = _tables(fitted)
    assert len(parts) >= 2 and all(p[0][0] == "concurrency" for p in parts)
    assert all(sum(column_px(p)) <= TABLE_PX for p in parts)
    assert "*(the same rows, continued: columns" in fitted and fitted.endswith("\n\nafter\n")
    cells = [_words(c) for p in parts for row in p for c in row[1:]]
    for row in [header, *rows]:
        for cell in row[1:]:
            assert _words(cell) in cells  # every cell, whole, in one of the parts
    small = "| a | b |\n|---|---:|\n| x | 1 |\n"
    assert fit_tables(small) == small  # a table that fits is left alone
    assert cell_px("**bold**") > cell_px("bold")


def test_the_results_table_is_one_row_per_level_and_metric(answer):
    records = level_records(answer)
    rows = level_rows(records)
    assert {"variant", "c", "metric", "value", "95% lo", "95% hi"} <= set(rows[0])
    assert len({k for r in rows for k in r}) <= 9  # a few columns wide, not 30
    by = {(r["variant"], r["c"], r["metric"]): r for r in rows}
    for rec in records:
        tput = by[(rec["variant"], rec["concurrency"], "output tok/s")]
        assert (tput["value"], tput["95% lo"], tput["95% hi"]) == (
            rec["output_throughput"],
            rec["output_throughput_lo"],
            rec["output_throughput_hi"],
        )
        speedup = by[(rec["variant"], rec["concurrency"], "speedup")]
        assert speedup["value"] == rec["speedup_vs_baseline"]
        assert speedup["95% lo"] == rec["speedup_lo"]
    assert not any(r["metric"] == "accept length" for r in rows if r["variant"] == "baseline")


def test_the_log_summary_is_plain_aligned_text(store):
    summary = summarize(store.read_levels(RUN))
    text = summary_text(RUN, summary, {"eagle3-s9-k1-d10": "RuntimeError: boom"})
    markdown = summary_markdown(RUN, summary, {})
    assert SEPARATOR.search(markdown) and not SEPARATOR.search(text)
    assert "|" not in text and "`" not in text and not re.search(r"^#", text, re.M)
    lines = text.splitlines()
    assert lines[0] == f"specsweep run {RUN}"
    head = lines.index(next(line for line in lines if line.startswith("concurrency ")))
    rule, first = lines[head + 1], lines[head + 2]
    assert set(rule) == {"-", " "}
    ends = [m.end() for m in re.finditer("─+", rule)]
    for line in lines[head + 2 : lines.index("", head)]:
        assert all(line[e - 1] != " " for e in ends), line  # numbers end at their column's edge
    assert first.split()[0] == "1" and "±2.0%" in first
    assert "- eagle3-s9-k1-d10: RuntimeError: boom" in text


def test_a_text_table_wraps_its_text_to_stay_under_the_log_width():
    why = " ".join(f"reason{i}" for i in range(40))
    grid = Grid(["c", "best", "why"], [["1", "eagle3-s2-k1-d3", why], ["16", "baseline", "no"]],
                [True, False, False])  # fmt: skip
    lines = text_table(grid)
    assert len(why) > TEXT_WIDTH and max(map(len, lines)) <= TEXT_WIDTH
    assert lines[0].startswith(" c  best") and lines[1].startswith("--  ---")
    assert " ".join(line[len(" 1  eagle3-s2-k1-d3  ") :].strip() for line in lines[2:-1]) == why
    assert lines[-1].split() == ["16", "baseline", "no"]


def test_a_publish_links_the_html_only_where_it_is_served(store, answer, files, monkeypatch):
    import specsweep.tasks.answer as task

    made: dict[str, list[tuple]] = {}

    def record(name):
        return lambda *a, **kw: made.setdefault(name, []).append((a, kw))

    for name in ("create_table_artifact", "create_markdown_artifact", "create_link_artifact"):
        monkeypatch.setattr(task, name, record(name))
    monkeypatch.setattr(task, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(task, "write_report", lambda *a: files)  # the fixture's, same answer
    out = task.publish_answer.fn(store.root, RUN)
    pages = {kw["key"]: a[0] for a, kw in made["create_markdown_artifact"]}
    assert set(pages) == {task.ANSWER_KEY, task.REPORT_KEY}
    assert "create_link_artifact" not in made and out["report_url"] is None
    assert all(images(p) and "file://" not in p for p in pages.values())
    (table, _), *_ = made["create_table_artifact"]
    assert table[0] == level_rows(level_records(answer))
    made.clear()
    out = task.publish_answer.fn(store.root, RUN, report_base_url="http://results.lan/")
    assert out["report_url"] == f"http://results.lan/reports/{RUN}/report.html"
    (args, kw), *_ = made["create_link_artifact"]
    assert args[0] == out["report_url"] and kw["key"] == task.REPORT_LINK_KEY
    assert task.REPORT_LINK_KEY in out["artifacts"]


def _tables(page: str) -> list[list[list[str]]]:
    """Each Markdown table of a page as rows of cells (header first)."""
    from specsweep.report.artifacts import _cells

    out, lines = [], page.split("\n")
    for i, line in enumerate(lines):
        if SEPARATOR.match(line) and i and lines[i - 1].startswith("|"):
            rows = [lines[i - 1], *_take_rows(lines[i + 1 :])]
            out.append([_cells(r) for r in rows])
    return out


def _take_rows(lines: list[str]) -> list[str]:
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def _words(cell: str) -> str:
    return " ".join(cell.replace("<br>", " ").split())


def test_the_embedded_speedup_plot_keeps_its_colours(files):
    """The page's small palette PNG draws the speedup plot's colours as themselves, the
    "speculation pays" and "loses" labels' (a few hundred pixels each) as well as the bands'
    and lines': Pillow's default median cut spent the palette on the bands' pale blends and
    drew the labels grey and brown."""
    small = Image.open(io.BytesIO(files.inline["speedup"])).convert("RGB")
    shown = np.array([rgb for _, rgb in small.getcolors()])
    full = Image.open(files.plots["speedup"]).convert("RGB")
    drawn = {rgb for _, rgb in full.getcolors(maxcolors=1 << 20)}
    for colour in ("#2e7d32", "#c62828", PAYS_COLOR, LOSES_COLOR, BASELINE_COLOR, *PALETTE[:2]):
        rgb = tuple(round(255 * x) for x in to_rgb(colour))
        assert rgb in drawn, colour  # the full drawing has it
        nearest = int(np.abs(shown - np.array(rgb)).max(axis=1).min())
        assert nearest <= 10, (colour, nearest)
