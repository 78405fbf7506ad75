"""Write one run's report: a self-contained HTML file and the same content in Markdown.

The HTML embeds its plots (base64 PNG), so it can be mailed or attached to a ticket
with nothing beside it. The Markdown references the same PNGs, written next to it under
plots/; for a page that cannot reach files (a Prefect artifact), write_report(inline=True)
also encodes each plot small enough to embed (report/artifacts.py).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from specsweep.analysis.answer import CellAnswer, RunAnswer
from specsweep.analysis.levels import baseline_name, cell, interval_tables
from specsweep.report.baselines import baseline_sentences
from specsweep.report.caveats import level_notes, sentence
from specsweep.report.decision_view import decision_markdown, headline_text
from specsweep.report.figure import inline_png, png
from specsweep.report.plots import (
    APART,
    FIGURES,
    HOST_FIGURES,
    SEARCH_FIGURES,
    SHAPE_FIGURES,
    render_figures,
)
from specsweep.report.prose import paragraph
from specsweep.report.search import search_headline, search_paragraphs, search_tables
from specsweep.report.shapes import (
    load_line,
    pivot_summary,
    policy_text,
    shape_cells,
    shape_sections,
    surface_table_view,
)
from specsweep.report.tables import (
    Table,
    all_tables,
    best_table,
    export_table,
    failures_table,
    host_tables,
    pivot_table,
    policy_table,
    throughput_table,
    verification_tables,
)
from specsweep.results.intervals import Interval, ratio
from specsweep.results.location import local_path

CSS = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       max-width: 1120px; margin: 2em auto; padding: 0 1.5em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.answer { font-size: 1.15em; background: #f3f8f3; border-left: 4px solid #2e7d32;
          padding: .8em 1em; margin: 1em 0; }
.warn { background: #fff8e1; border-left: 4px solid #f9a825; padding: .6em 1em; }
table { border-collapse: collapse; margin: .8em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 9px; } th { background: #f5f5f5; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 12.5px; } img { max-width: 100%; margin: .5em 0 1.5em; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: 12px; }
"""


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    plots: dict[str, Path]
    inline: dict[str, bytes] = field(default_factory=dict)  # small PNGs, with inline=True
    # the report's tables, built once (about 0.5 s of CPU each time) for every page that
    # renders the report: the HTML, the Markdown file and the report artifact
    tables: tuple[Table, ...] = ()


def headline(answer: RunAnswer) -> str:
    """What a reader needs first, as one paragraph: the decision's headline (what to
    deploy, what it measured, the verdict; report/decision_view.py)."""
    return headline_text(answer)


def stated_headline(answer: RunAnswer) -> str:
    """The headline as a view states it: for a run of several shapes, the shape it is for
    leads (``At in512-out256: Use ...``); the load line under it says the rest."""
    return headline(answer)  # a cell's headline names its shape itself


def adaptive_lines(answer: RunAnswer) -> list[str]:
    """The engine-config side of the first cell's answer: each verified export's verdict,
    the steps-0 overhead, and why nothing was exported when adaptive variants ran without
    an export."""
    one = answer.first
    lines = []
    for v in one.verifications:
        lines.append(v.headline() + ".")
        if v.overhead:
            lines.append(paragraph(v.overhead))
    if one.export is not None and not one.verifications:
        tiers = one.export.adaptive_spec().describe()
        at = f" at {one.shape}" if one.shape else ""
        pick = f" --shape {one.shape}" if answer.multi_shape else ""
        line = (
            f"Exportable{at} as SGLang adaptive {tiers} (specsweep policy export "
            f"{answer.run_id}{pick}; verify with specsweep policy verify {answer.run_id} -c FILE)."
        )
        family = one.export.family.algorithm
        algorithms = one.levels.get("algorithm", pd.Series(dtype=object))
        outside = sorted(set(one.levels["variant"][algorithms.notna() & (algorithms != family)]))
        if outside:  # an algorithm sweep: the tiers only step one family's chains
            line += (
                f" The tiers choose among the {family} chains only; "
                f"{', '.join(outside)} cannot be tiers, and the deploy above weighs them too."
            )
        lines.append(line)
    if one.export is None and one.has_adaptive and one.export_refused:
        lines.append(paragraph(f"No adaptive export: {one.export_refused}"))
    return lines


def warnings(answer: RunAnswer) -> list[str]:
    """What a reader must know before trusting the first cell's numbers, as sentences:
    simulated (and its time scale), levels that measured a queue, random ids, mixed GPU
    kinds."""
    one = answer.first
    gpu = one.gpu_kind_warning
    return [sentence(n) for n in [*level_notes(one.levels), *([gpu] if gpu else [])]]


def hosts_line(answer: RunAnswer) -> str | None:
    """On the targets of a run measured on several (None for one target): how they compare
    and, for a fleet's baseline plan, whose baseline each host's variants were divided by."""
    hosts = answer.first.hosts
    if hosts is None:
        return None
    planned = plan_sentences(answer)
    return " ".join([hosts.line(within=bool(planned)), *planned])


def plan_sentences(answer: RunAnswer) -> list[str]:
    """A fleet's baseline plan in words and, with several GPU kinds, each kind's own answer
    (its first shape's; never compared across); empty without a plan."""
    said = baseline_sentences(answer)
    if len(answer.gpu_kinds) > 1:
        for kind in answer.gpu_kinds:
            other = answer.cell(gpu_kind=kind)
            hosts = ", ".join(sorted({str(t) for t in other.levels["target"].dropna()}))
            said.append(f"On {kind} ({hosts}): {' '.join(other.decision.headline())}")
    return said


def first_shape(answer: RunAnswer) -> str:
    """`` at in512-out256 (the first shape)`` after a section's title, for a run of several
    shapes (its top sections are the first shape's); "" otherwise."""
    return f" at {answer.first.shape} (the first load shape)" if answer.multi_shape else ""


def _md_table(table: Table, level: int = 3) -> list[str]:
    def cell(text: str, i: int, j: int) -> str:
        text = text.replace("|", "\\|")
        return f"**{text}**" if (i, j) in table.highlight else text

    lines = [f"{'#' * level} {table.title}", ""]
    lines.append("| " + " | ".join(table.columns) + " |")
    lines.append("|" + "|".join("---:" if n else "---" for n in table.numeric) + "|")
    for i, row in enumerate(table.rows):
        lines.append("| " + " | ".join(cell(t, i, j) for j, t in enumerate(row)) + " |")
    if table.note:
        lines += ["", table.note]
    return [*lines, ""]


def markdown(
    answer: RunAnswer, plot_paths: dict[str, str], tables: Sequence[Table] | None = None
) -> str:
    """The report in Markdown, plots linked at `plot_paths`; `tables`: all_tables(answer)
    where the caller built them already."""
    lines = [f"# specsweep report: run `{answer.run_id}`", ""]
    lines += [f"**{stated_headline(answer)}**", ""]
    load = load_line(answer)
    if load:
        lines += [load, ""]
    search = search_headline(answer.first.search)
    if search:
        lines += [search, ""]
    for line in adaptive_lines(answer):
        lines += [line, ""]
    for warning in warnings(answer):
        lines += [f"> {warning}", ""]
    if answer.multi_shape:
        lines += [f"## The answer{first_shape(answer)}", ""]
    for name, path in plot_paths.items():
        if name not in APART:
            lines += [f"![{FIGURES[name][0]}]({path})", ""]
    for table in all_tables(answer) if tables is None else tables:
        lines += _md_table(table)
    lines += shapes_markdown(answer, plot_paths)
    lines += search_markdown(answer, plot_paths)
    lines += hosts_markdown(answer, plot_paths)
    config = answer.first.config_json()
    if config:
        lines += ["### Configuration", "", "```json", config, "```", ""]
    commands = answer.first.variants()
    if "server_command" in commands.columns:
        lines += ["### Server command lines", ""]
        for rec in commands.to_dict("records"):
            lines += [f"`{rec['variant']}`:", "", "```", str(rec["server_command"]), "```", ""]
    return "\n".join(lines)


def shapes_markdown(answer: RunAnswer, plot_paths: dict[str, str] | None = None) -> list[str]:
    """The Load shapes section (runs of several shapes only): the surface (picture and
    table), then each shape's own answer: its policy, best per level, pivots, tiers."""
    surface = surface_table_view(answer)
    if surface is None:
        return []
    lines = ["## Load shapes", ""]
    for name, path in (plot_paths or {}).items():
        if name in SHAPE_FIGURES:
            lines += [f"![{FIGURES[name][0]}]({path})", ""]
    lines += _md_table(surface)
    for section in shape_sections(answer):
        lines += [f"### {section.shape}", "", f"{section.load}.", "", f"**{section.policy}**", ""]
        for table in section.tables:
            lines += _md_table(table, level=4)
        if section.export_note:
            lines += [section.export_note, ""]
    return lines


def search_markdown(answer: RunAnswer, plot_paths: dict[str, str] | None = None) -> list[str]:
    """The Search section (runs with an adaptive search only): what it launched and why it
    stopped, the skipped levels, the variants not launched and the model's check, and the
    predicted curves; every prediction labelled as such, none in the tables above."""
    paragraphs = search_paragraphs(answer.first.search)
    if not paragraphs:
        return []
    lines = ["## Search", ""]
    for text in paragraphs:
        lines += [text, ""]
    for name, path in (plot_paths or {}).items():
        if name in SEARCH_FIGURES:
            lines += [f"![{FIGURES[name][0]}]({path})", ""]
    for table in search_tables(answer.first.search):
        lines += _md_table(table)
    return lines


def hosts_markdown(answer: RunAnswer, plot_paths: dict[str, str]) -> list[str]:
    """The Hosts section (runs on several targets only): summary line, plot, tables."""
    line = hosts_line(answer)
    if line is None:
        return []
    lines = ["## Hosts", "", line, ""]
    for name, path in plot_paths.items():
        if name in HOST_FIGURES:
            lines += [f"![{FIGURES[name][0]}]({path})", ""]
    for table in host_tables(answer):
        lines += _md_table(table)
    return lines


def _html_table(table: Table, level: int = 3) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in table.columns)
    body = []
    for i, row in enumerate(table.rows):
        cells = []
        for j, text in enumerate(row):
            cls = ' class="n"' if table.numeric[j] else ""
            content = f"<b>{esc(text)}</b>" if (i, j) in table.highlight else esc(text)
            cells.append(f"<td{cls}>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{esc(table.note)}</p>' if table.note else ""
    return (
        f"<h{level}>{esc(table.title)}</h{level}><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>{note}"
    )


def _html_img(name: str, data: bytes) -> str:
    b64 = base64.b64encode(data).decode()
    return f'<img alt="{html.escape(FIGURES[name][0])}" src="data:image/png;base64,{b64}">'


def html_document(
    answer: RunAnswer, pngs: dict[str, bytes], tables: Sequence[Table] | None = None
) -> str:
    esc = html.escape
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>specsweep report {esc(answer.run_id)}</title><style>{CSS}</style></head><body>",
        f"<h1>specsweep report: run <code>{esc(answer.run_id)}</code></h1>",
        f'<div class="answer">{esc(stated_headline(answer))}</div>',
    ]
    load = load_line(answer)
    if load:
        parts.append(f'<p class="note">{esc(load)}</p>')
    search = search_headline(answer.first.search)
    if search:
        parts.append(f'<p class="note">{esc(search)}</p>')
    parts += [f"<p>{esc(line)}</p>" for line in adaptive_lines(answer)]
    parts += [f'<p class="warn">{esc(w)}</p>' for w in warnings(answer)]
    main = {n: d for n, d in pngs.items() if n not in APART}
    if main:
        parts.append(f"<h2>Plots{esc(first_shape(answer))}</h2>")
    parts += [_html_img(name, data) for name, data in main.items()]
    parts.append(f"<h2>Tables{esc(first_shape(answer))}</h2>")
    parts += [_html_table(t) for t in (all_tables(answer) if tables is None else tables)]
    parts += shapes_html(answer, pngs)
    paragraphs = search_paragraphs(answer.first.search)
    if paragraphs:
        parts.append("<h2>Search</h2>")
        parts += [f"<p>{esc(text)}</p>" for text in paragraphs]
        parts += [_html_img(n, d) for n, d in pngs.items() if n in SEARCH_FIGURES]
        parts += [_html_table(t) for t in search_tables(answer.first.search)]
    line = hosts_line(answer)
    if line is not None:
        parts += ["<h2>Hosts</h2>", f"<p>{esc(line)}</p>"]
        parts += [_html_img(n, d) for n, d in pngs.items() if n in HOST_FIGURES]
        parts += [_html_table(t) for t in host_tables(answer)]
    config = answer.first.config_json()
    if config:
        parts.append(
            f"<details><summary>Configuration (JSON)</summary><pre>{esc(config)}</pre></details>"
        )
    commands = answer.first.variants()
    if "server_command" in commands.columns:
        parts.append("<h3>Server command lines</h3>")
        for rec in commands.to_dict("records"):
            parts.append(
                f"<p><b>{esc(rec['variant'])}</b></p><pre>{esc(str(rec['server_command']))}</pre>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def shapes_html(answer: RunAnswer, pngs: dict[str, bytes]) -> list[str]:
    """The Load shapes section in HTML (see shapes_markdown); empty for one shape."""
    surface = surface_table_view(answer)
    if surface is None:
        return []
    esc = html.escape
    parts = ["<h2>Load shapes</h2>"]
    parts += [_html_img(n, d) for n, d in pngs.items() if n in SHAPE_FIGURES]
    parts.append(_html_table(surface))
    for section in shape_sections(answer):
        parts += [
            f"<h3>{esc(section.shape)}</h3>",
            f'<p class="note">{esc(section.load)}</p>',
            f'<div class="answer">{esc(section.policy)}</div>',
        ]
        parts += [_html_table(t, level=4) for t in section.tables]
        if section.export_note:
            parts.append(f"<p>{esc(section.export_note)}</p>")
    return parts


def write_report(answer: RunAnswer, out_dir: Path, inline: bool = False) -> ReportFiles:
    """report.html (self-contained), report.md and plots/*.png under out_dir; `inline`:
    each plot also as a small PNG to embed in a page (ReportFiles.inline), resampled from
    the same drawing."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = render_figures(answer)
    pngs = {name: png(fig) for name, fig in figures.items()}
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(exist_ok=True)
    plot_files = {}
    for name, data in pngs.items():
        plot_files[name] = plot_dir / f"{name}.png"
        plot_files[name].write_bytes(data)
    tables = tuple(all_tables(answer))
    html_path = out_dir / "report.html"
    html_path.write_text(html_document(answer, pngs, tables), encoding="utf-8")
    md_path = out_dir / "report.md"
    plot_links = {n: f"plots/{p.name}" for n, p in plot_files.items()}
    md_path.write_text(markdown(answer, plot_links, tables), encoding="utf-8")
    small = {name: inline_png(data) for name, data in pngs.items()} if inline else {}
    return ReportFiles(html_path, md_path, plot_files, small, tables)


# Where reports go when the results root is not on this machine (s3://, gs://, ...):
# HTML and PNGs are for people, not for the shared store, and are not uploaded.
LOCAL_REPORTS = Path("specsweep-reports")


def default_report_dir(results_root: Path | str, run_id: str) -> Path:
    """Reports live beside the tables they came from: <results>/reports/<run_id>/; for a
    root on another filesystem (an object store URI), in ./specsweep-reports/<run_id>/
    on this machine."""
    local = local_path(results_root)
    return (local / "reports" if local is not None else LOCAL_REPORTS) / run_id


def answer_markdown(
    answer: RunAnswer,
    images: Mapping[str, str] | None = None,
    report: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> str:
    """The short answer for a Prefect artifact: headline, policy, throughput and pivots,
    each said at its load shape and workload, after every caveat on the numbers; with
    several shapes, the surface and every shape's policy and pivots.

    `images`: figure name -> a URI the page can load (a data: URI, or a URL where the
    results are served); of them the answer shows where speculation pays (the speedup
    curves, after the caveats) and, for several shapes, the surface (in the Load shapes
    part). `report`: the lines that say where the full report is. `notes`: what else the
    run's records say about the numbers (the GPUs' memory before the sweep and after it)."""
    images = images or {}
    lines = [f"## specsweep answer: run `{answer.run_id}`", ""]
    lines += decision_markdown(answer)
    load = load_line(answer)
    if load:
        lines += [load, ""]
    for line in adaptive_lines(answer):
        lines += [line, ""]
    for warning in warnings(answer):
        lines += [f"> {warning}", ""]
    for note in notes:
        lines += [note, ""]
    line = hosts_line(answer)
    if line is not None:
        lines += [f"{line} See the report's Hosts section.", ""]
    if "speedup" in images:
        lines += [f"![{FIGURES['speedup'][0]}]({images['speedup']})", ""]
    one = answer.first
    tables = [
        policy_table(one),
        *verification_tables(one),
        export_table(one),
        pivot_table(one) if one.pivots else None,
    ]
    if not one.throughput.empty:
        tables += [throughput_table(one), best_table(one)]
    tables.append(failures_table(one))
    for table in tables:
        if table is not None:
            lines += _md_table(table)
    lines += shapes_summary_markdown(answer, images.get("surface"))
    lines += search_markdown(answer)
    lines += [text for line in report for text in (line, "")]
    return "\n".join(lines).rstrip("\n") + "\n"


def shapes_summary_markdown(answer: RunAnswer, image: str | None = None) -> list[str]:
    """The artifact's Load shapes part: the surface (its picture where `image` is given,
    and its table), then each shape's policy line and pivots (the report's Load shapes
    section has their tables)."""
    surface = surface_table_view(answer)
    if surface is None:
        return []
    lines = ["### Load shapes", ""]
    if image is not None:
        lines += [f"![{FIGURES['surface'][0]}]({image})", ""]
    lines += _md_table(surface, level=4)
    for one in shape_cells(answer):
        lines += [f"- **{one.shape}**: {policy_text(one)}", f"  - pivots: {pivot_summary(one)}"]
    return [*lines, ""]


def level_records(answer: RunAnswer) -> list[dict[str, object]]:
    """One flat row per measured level of the first cell (with several shapes, of the first
    GPU kind's every shape, shape by shape in the run's order): see cell_level_records."""
    return [
        rec for one in shape_cells(answer) or (answer.first,) for rec in cell_level_records(one)
    ]


def cell_level_records(answer: CellAnswer) -> list[dict[str, object]]:
    """One flat row per measured level, for a table artifact (JSON-safe values); a search's
    skipped levels are not measurements and are left out (the search artifact lists them).

    Each metric is followed by its 95% interval (`_lo`, `_hi`; null where the level has
    none), the speedup over the baseline by its interval, and whether the level met
    load.target_ci (null without a target). On several targets every stored row is
    listed, with its `target` and whether the answer uses it (`in_answer`); the speedup
    is given for those only. Each row says its load `shape` (when the rows have one).
    """
    best = answer.best.set_index("concurrency")
    base = best.get("baseline_throughput")
    base_name = baseline_name(answer.levels)
    lo, hi = interval_tables(answer.levels, "output_throughput")
    several = answer.hosts is not None and answer.stored is not None
    frame = answer.stored if several else answer.levels
    frame = frame[frame["status"] != "skipped"]
    metrics = ["output_throughput", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99"]
    wanted = [
        *(["target"] if several else []),
        "variant",
        "concurrency",
        "status",
        *(f"{m}{end}" for m in metrics for end in ("", "_lo", "_hi")),
        "accept_length",
        "repeats",
        "output_throughput_cv",
        "target_ci",
        "target_ci_met",
    ]
    cols = [c for c in wanted if c in frame.columns]
    used = set(answer.levels.index)
    rows = []
    for index, rec in zip(frame.index, frame[cols].to_dict("records"), strict=True):
        c = rec["concurrency"]
        speedup = Interval(math.nan)
        if base is not None and c in base:
            speedup = Interval(rec["output_throughput"] / base[c])
            if base_name is not None and rec["variant"] != base_name and c in lo.index:
                mine = Interval(
                    rec["output_throughput"],
                    *(rec.get(f"output_throughput_{e}", math.nan) for e in ("lo", "hi")),
                )
                speedup = ratio(mine, cell(answer.throughput, lo, hi, c, base_name))
        if several:
            rec["in_answer"] = index in used
            speedup = speedup if index in used else Interval(math.nan)
        ok = not math.isnan(speedup.value)
        rec["speedup_vs_baseline"] = speedup.value if ok else None
        rec["speedup_lo"], rec["speedup_hi"] = (speedup.lo, speedup.hi) if ok else (None, None)
        shape = {"shape": answer.shape} if answer.shape is not None else {}
        rows.append(shape | {k: _json_safe(v) for k, v in rec.items()})
    return sorted(
        rows,
        key=lambda r: (
            r["variant"] != base_name,
            r["variant"],
            r["concurrency"],
            not r.get("in_answer", True),
            r.get("target") or "",
        ),
    )


def _json_safe(value: object) -> object:
    if hasattr(value, "item"):
        value = value.item()  # numpy scalar
    if isinstance(value, float):
        return None if value != value else round(value, 4)
    return value


def report_link(html: Path, results_dir: Path | str, base_url: str | None) -> str:
    """file:// URI of the report, or base_url + its path under the results root when served."""
    root = local_path(results_dir)  # None: an object store, where reports are not written
    if base_url and root is not None and html.resolve().is_relative_to(root.resolve()):
        relative = html.resolve().relative_to(root.resolve())
        return base_url.rstrip("/") + "/" + relative.as_posix()
    return html.resolve().as_uri()  # also when the report was written outside the results


def search_records(answer: RunAnswer) -> list[dict[str, object]]:
    """One row per variant of a search's grid, for a table artifact (JSON-safe values):
    whether it was launched; for a launched one, its levels measured and skipped and how its
    before-launch prediction held (levels inside the predicted 95% interval, median error);
    for one not launched, its best predicted ratio to the measured best (`predicted_*`:
    predictions, never measurements) and why it was not launched. Empty without a search."""
    view = answer.first.search
    if not view.present:
        return []
    not_launched = view.not_launched().set_index("variant")
    check = view.prediction_check()
    levels = answer.first.levels
    final = view.final()
    why = final.dropna(subset=["reason"]).drop_duplicates("variant").set_index("variant")["reason"]
    rows: list[dict[str, object]] = []
    for variant in view.grid_variants():
        rec: dict[str, object] = {"variant": variant}
        if variant in not_launched.index:
            nl = not_launched.loc[variant]
            rec |= {
                "launched": False,
                "predicted_best_ratio": _json_safe(nl["best_ratio"]),
                "predicted_best_at": _json_safe(nl["best_at"]),
                "predicted_upper_ratio": _json_safe(nl["upper_ratio"]),
                "reason": nl["reason"],
            }
        else:
            mine = levels[levels["variant"] == variant]
            done = check[(check["variant"] == variant) & check["measured"].notna()]
            rec |= {
                "launched": True,
                "reason": why.get(variant),
                "levels_ok": int((mine["status"] == "ok").sum()),
                "levels_skipped": int((mine["status"] == "skipped").sum()),
                "levels_failed": int((~mine["status"].isin(["ok", "skipped"])).sum()),
                "predicted_levels_checked": len(done),
                "predicted_inside_95": int(sum(bool(x) for x in done["inside"])),
                "predicted_median_abs_error": _json_safe(done["error"].abs().median())
                if len(done)
                else None,
            }
        rows.append(rec)
    keys = list(dict.fromkeys(k for r in rows for k in r))  # one shape: the UI's columns
    rows = [{k: r.get(k) for k in keys} for r in rows]
    # launched first; the rest by their predicted best ratio (absent when all were launched)
    return sorted(rows, key=lambda r: (not r["launched"], -(r.get("predicted_best_ratio") or 0)))
