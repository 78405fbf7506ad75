"""The report's tables as plain cells, rendered alike into Markdown and HTML."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from specsweep.analysis.answer import CellAnswer, RunAnswer
from specsweep.analysis.levels import LATENCY_COLUMNS, baseline_name, interval_tables
from specsweep.report.baselines import (
    ROLE_TEXT,
    calibration_text,
    plans_in_order,
    verdict_text,
)
from specsweep.report.evidence import (
    BEST_HEADER,
    INTERVALS_NOTE,
    PIVOT_NOTE,
    REPEATS_NOTE,
    at_text,
    best_note,
    best_rows,
    best_text,
    gain_text,
    has_intervals,
    pivot_cell,
    pivot_line,
    pm,
    skipped_cells,
    speedup_text,
    target_ci_line,
    throughput_rows,
    tied_at,
)
from specsweep.report.prose import paragraph


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    numeric: list[bool]  # right-align these columns
    note: str = ""
    highlight: set[tuple[int, int]] = field(default_factory=set)  # (row, column) cells in bold


def num(value: object, fmt: str = ",.1f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return "—"
    return format(value, fmt)


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:+.1%}"


def at(answer: CellAnswer) -> str:
    """`` at in512-out256, builtin prompts via chat``: what a title's numbers were measured
    under ("" for rows written before load shapes)."""
    return at_text(answer.levels, answer.shape)


def policy_table(answer: CellAnswer) -> Table | None:
    p = answer.policy
    if p is None:
        return None
    base = baseline_name(answer.levels) or "baseline"
    d = answer.decision
    by_level = d is not None and d.deploy.kind == "by-level"
    rows = [
        [
            ("with one server: " if by_level else "recommended: ") + p.rule(),
            num(p.throughput),
            gain_text(p.gain_vs_baseline, p.gain_lo, p.gain_hi),
        ],
        [f"always {base} (no speculation)", num(p.baseline_throughput), _pct(0.0)],
    ]
    if p.best_single is not None:
        rows.append(
            [
                f"always {p.best_single} (best single variant)",
                num(p.best_single_throughput),
                _pct(p.best_single_throughput / p.baseline_throughput - 1),
            ]
        )
    rows.append(
        [
            "per-level best variant (oracle, ceiling of any rule)",
            num(p.oracle_throughput),
            _pct(p.oracle_throughput / p.baseline_throughput - 1),
        ]
    )
    weights = ", ".join(f"c={c}: {w:.3g}" for c, w in p.weights.items())
    note = f"Throughput weighted by the traffic mix, {p.mix.describe()} (weights {weights})."
    if not math.isnan(p.gain_lo):
        note += (
            " 95%: the recommended rule's gain from the levels' intervals, over the levels "
            "where it runs speculation."
        )
    if by_level:
        assert d is not None
        note += (
            f" The levels chose more than one algorithm, so the decision deploys {d.deploy.rule}"
            " (one SGLang server runs one algorithm: each range its own server); this rule is "
            "the best one server can do."
        )
    elif p.tie_note:
        note += f" {p.tie_note}"
    return Table(
        f"Speculation policy{at(answer)}",
        ["rule", "weighted output tok/s", "vs always-baseline"],
        rows,
        [False, True, True],
        note=note,
        highlight={(0, 0), (0, 1), (0, 2)},
    )


def _interval_notes(answer: CellAnswer) -> str:
    """What ± means here, and whether load.target_ci was met."""
    notes = []
    if has_intervals(answer.levels):
        notes.append(INTERVALS_NOTE)
    elif answer.best.get("speedup_spread", pd.Series(dtype=float)).fillna(0).gt(0).any():
        notes.append(REPEATS_NOTE)
    else:
        notes.append("No level carries a 95% interval (results written before schema 3): no ±.")
    target = target_ci_line(answer.levels)
    if target:
        notes.append(target)
    return " ".join(notes)


def throughput_table(answer: CellAnswer) -> Table:
    table = answer.throughput
    best = answer.best.set_index("concurrency", drop=False)
    lo, hi = interval_tables(answer.levels, "output_throughput")
    cols = ["concurrency", *table.columns, "best", "speedup"]
    rows, bold = [], set()
    skipped = skipped_cells(answer.skipped_levels)
    cells = throughput_rows(table, lo, hi, answer.best, skipped)
    ties = any(tied_at(answer.best).values())
    for i, (c, row) in enumerate(zip(table.index, cells, strict=True)):
        rec = best.loc[c].to_dict()
        winner = rec["best_variant"]
        rows.append([str(c), *row, best_text(rec), speedup_text(rec)])
        if winner in table.columns:
            bold.add((i, 1 + list(table.columns).index(winner)))
    return Table(
        f"Output throughput (tok/s) per variant and concurrency{at(answer)}",
        cols,
        rows,
        [True, *([True] * len(table.columns)), False, True],
        note="Bold: the best variant at each level; speedup = best / baseline. "
        + ("≈: a near-tie with the best (see the next table). " if ties else "")
        + (
            "skipped: the adaptive search did not measure that level (see Search); "
            "measured levels only, no prediction. "
            if skipped
            else ""
        )
        + _interval_notes(answer),
        highlight=bold,
    )


def best_table(answer: CellAnswer) -> Table | None:
    """Per level: the best with its interval, speedup, runner-up and lead, near-ties."""
    if answer.best.empty:
        return None
    rows = best_rows(answer.best)
    ties = {i for i, r in enumerate(rows) if r[-1] != "no"}
    return Table(
        f"Best variant per level, and how sure{at(answer)}",
        BEST_HEADER,
        rows,
        [True, False, True, True, False, False],
        note=best_note(answer.best),
        highlight={(i, len(BEST_HEADER) - 1) for i in ties},
    )


def pivot_table(answer: CellAnswer) -> Table:
    rows, bold = [], set()
    for i, (variant, pivot) in enumerate(answer.pivots.items()):
        rows.append([variant, pivot_cell(pivot), pivot_line(pivot)])
        if pivot.soft:
            bold.add((i, 1))
    return Table(
        f"Pivot points{at(answer)}",
        ["variant", "pivot concurrency", "detail"],
        rows,
        [False, True, False],
        note=PIVOT_NOTE,
        highlight=bold,
    )


def slo_table(answer: CellAnswer) -> Table | None:
    if answer.slo is None or not answer.slo.active or "best_variant_slo" not in answer.best:
        return None
    rows = []
    for rec in answer.best.to_dict("records"):
        meets = rec.get("baseline_meets_slo")
        rows.append(
            [
                str(rec["concurrency"]),
                rec["best_variant_slo"] or "none meets the SLO",
                num(rec["best_throughput_slo"]),
                num(rec.get("speedup_slo"), ".2f") + "x" if rec["best_variant_slo"] else "—",
                "yes" if meets else "no",
            ]
        )
    return Table(
        f"Best variant within the latency SLO ({answer.slo.describe()}){at(answer)}",
        ["concurrency", "best variant meeting the SLO", "tok/s", "speedup", "baseline meets"],
        rows,
        [True, False, True, True, False],
    )


def latency_tables(answer: CellAnswer) -> Table:
    lat = answer.latency
    has_slo = "meets_slo" in lat.columns
    bounds = {m: interval_tables(answer.levels, m) for m in LATENCY_COLUMNS}

    def cell(rec: dict, metric: str) -> str:
        lo, hi = bounds[metric]
        c, v = rec["concurrency"], rec["variant"]
        known = c in lo.index and v in lo.columns
        return pm(
            rec[metric], lo.at[c, v] if known else None, hi.at[c, v] if known else None, ".2f"
        )

    cols = ["variant", "concurrency", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99"]
    rows = []
    for rec in lat.to_dict("records"):
        row = [rec["variant"], str(rec["concurrency"]), *(cell(rec, m) for m in LATENCY_COLUMNS)]
        if has_slo:
            row.append("yes" if rec["meets_slo"] else "no")
        rows.append(row)
    note = (
        "±: half of the 95% interval (a bootstrap over requests)."
        if any(lo.notna().any().any() for lo, _ in bounds.values())
        else ""
    )
    return Table(
        f"Latency (ms) per variant and concurrency{at(answer)}",
        cols + (["meets SLO"] if has_slo else []),
        rows,
        [False, True, True, True, True, True] + ([False] if has_slo else []),
        note=note,
    )


def accept_table(answer: CellAnswer) -> Table | None:
    table = answer.accept_length()
    if table.empty:
        return None
    rows = [[str(c), *(num(v, ".2f") for v in row.to_numpy())] for c, row in table.iterrows()]
    return Table(
        f"Accept length (accepted tokens per verify step){at(answer)}",
        ["concurrency", *table.columns],
        rows,
        [True] * (1 + len(table.columns)),
    )


def failures_table(answer: CellAnswer) -> Table | None:
    rows = [[v, "all levels", e] for v, e in answer.variant_errors.items()]
    rows += [
        [r["variant"], str(r["concurrency"]), str(r["error"])]
        for r in answer.failed_levels.to_dict("records")
    ]
    if not rows:
        return None
    return Table("Failures", ["variant", "concurrency", "error"], rows, [False, False, False])


def category_table(answer: CellAnswer) -> Table | None:
    """Per variant (rows) and prompt category (columns): the mean accept length and the
    median per-stream decode speed at the variant's lowest level; None without categories."""
    cats = answer.categories
    if cats.empty:
        return None
    order = {v: i for i, v in enumerate(answer.throughput.columns)}
    variants = sorted(cats["variant"].unique(), key=lambda v: (order.get(v, len(order)), v))
    categories = sorted(cats["category"].unique(), key=lambda c: (c not in CATEGORY_ORDER, c))
    cells = cats.set_index(["variant", "category"])
    rows = []
    for variant in variants:
        mine = cats[cats["variant"] == variant]
        at_c = ", ".join(str(int(c)) for c in sorted(mine["concurrency"].unique()))
        row = [str(variant), at_c]
        for category in categories:
            if (variant, category) not in cells.index:
                row.append("—")
                continue
            rec = cells.loc[(variant, category)]
            row.append(
                f"{num(rec['accept_length'], '.2f')} · {num(rec['decode_tok_s'], ',.0f')} tok/s "
                f"(n={int(rec['requests'])})"
            )
        rows.append(row)
    return Table(
        f"Per prompt category{at(answer)}: accept length · decode tok/s per stream",
        ["variant", "at c", *map(str, categories)],
        rows,
        [False, True, *([True] * len(categories))],
        note="accept length: mean accepted tokens per verify pass over the variant's measured "
        "requests of that category (— without speculation); decode tok/s: the median "
        "per-stream decode speed (1000 / TPOT) at the variant's lowest level (at c), where a "
        "stream's speed shows speculation's gain rather than the batch's; n: requests.",
    )


CATEGORY_ORDER = ("chat", "code", "reasoning", "summarisation")


def environment_table(answer: RunAnswer) -> Table:
    """The run's facts, as its first cell's rows say them, and every load shape."""
    first = answer.first
    facts = first.facts()
    load = {
        "load shapes": ", ".join(answer.shapes) or None,
        "workload": first.workload,
        "endpoint": ", ".join(sorted(map(str, first.levels["endpoint"].dropna().unique())))
        if "endpoint" in first.levels.columns
        else None,
    }
    facts |= {k: v for k, v in load.items() if v}
    return Table(
        "Run and environment", ["", ""], [[k, v] for k, v in facts.items()], [False, False]
    )


def variants_table(answer: CellAnswer) -> Table:
    frame = answer.variants()
    cols = [c for c in frame.columns if c != "server_command"]
    rows = [
        [num(v, "g") if isinstance(v, float) else ("—" if v is None else str(v)) for v in rec]
        for rec in frame[cols].itertuples(index=False)
    ]
    return Table("Variants", cols, rows, [False] * len(cols))


def _shares(shares: dict[int, float] | None) -> str:
    if not shares:
        return "no trace"
    top = sorted(shares.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{s} steps {v:.0%}" if s else f"no drafting {v:.0%}" for s, v in top)


def export_table(answer: CellAnswer) -> Table | None:
    """The run's answer as SGLang adaptive tiers (one row per tier)."""
    if answer.export is None:
        return None
    lines = answer.export.describe()
    rows = []
    for text in lines[1:]:
        span, sep, rest = text.partition(": ")
        if sep and span.startswith("batch "):
            rows.append([span.removeprefix("batch "), rest])
    notes = [t for t in lines[1:] if not t.startswith("batch ")]
    return Table(
        f"Adaptive tiers exported from this run{at(answer)} (--speculative-adaptive-config)",
        ["batch sizes", "steps, and why"],
        rows,
        [False, False],
        note=paragraph(lines[0], *notes),
    )


def verification_tables(answer: CellAnswer) -> list[Table]:
    """Each adaptive config with its own tiers against the best a tier config can reach."""
    out = []
    for v in answer.verifications:
        rows, bold = [], set()
        for i, r in enumerate(v.levels.itertuples()):
            rows.append(
                [
                    str(r.concurrency),
                    num(r.throughput),
                    num(r.share_of_reachable, ".2f"),
                    num(r.share_of_best_static, ".2f"),
                    num(r.share_of_default, ".2f"),
                    num(r.share_of_baseline, ".2f"),
                    f"{r.tier_key}: [{','.join(map(str, r.intended_steps))}]",
                    _shares(r.steps_share),
                    "ok" if r.ok else f"short: {r.reason}",
                ]
            )
            if not r.ok:
                bold.add((i, 8))
        cols = ["concurrency", "tok/s", "of best tier config", "of best static",
                "of sglang default tiers", "of baseline", "tier", "ran", "verdict"]  # fmt: skip
        note = paragraph(v.headline(), v.overhead or "", *v.notes)
        out.append(
            Table(f"Verification of {v.variant}", cols, rows, [True] * 6 + [False] * 3, note, bold)
        )
    return out


def steps_table(answer: CellAnswer) -> Table | None:
    """What each adaptive server really ran, from its log."""
    ran = answer.steps_ran()
    if ran.empty:
        return None
    rows = [[r.variant, str(r.concurrency), _shares(r.steps_share)] for r in ran.itertuples()]
    return Table(
        "What the adaptive servers ran (share of each level's time, from the server log)",
        ["variant", "concurrency", "step counts"],
        rows,
        [False, True, False],
    )


def all_tables(answer: RunAnswer) -> list[Table]:
    """The first cell's, in report order, then the run's; tables that do not apply (no
    SLO, no failures) are left out."""
    first = answer.first
    tables = [
        policy_table(first),
        *verification_tables(first),
        export_table(first),
        steps_table(first),
        throughput_table(first),
        best_table(first),
        pivot_table(first) if first.pivots else None,
        slo_table(first),
        latency_tables(first),
        accept_table(first),
        category_table(first),
        failures_table(first),
        environment_table(answer),
        variants_table(first),
    ]
    return [t for t in tables if t is not None]


def _gpu(rec: dict) -> str:
    count, name = rec.get("gpu_count"), rec.get("gpu_name")
    return f"{count}x {name}" if count and name else str(name or "—")


def hosts_table(answer: CellAnswer) -> Table | None:
    """One row per target: GPU identity, what it measured, how it compares (multi-target runs)."""
    hc = answer.hosts
    if hc is None:
        return None
    cols = [
        "target",
        "GPU host",
        "GPUs",
        "driver",
        "GPU uuids",
        "ok levels",
        "failed",
        "in the answer",
        "shared levels",
        "median tok/s vs fastest",
        "threshold",
        "verdict",
    ]
    rows, bold = [], set()
    for i, rec in enumerate(hc.hosts.to_dict("records")):
        ratio = rec["median_ratio"]
        basis = f"{hc.z:g} SE" if rec["basis"] == "repeats" else "min."
        rows.append(
            [
                str(rec["target"]),
                str(rec.get("gpu_host") or "—"),
                _gpu(rec),
                str(rec.get("driver_version") or "—"),
                str(rec.get("gpu_uuids") or "—"),
                str(rec["ok_levels"]),
                str(rec["failed_levels"]),
                rec["in_answer"] or "—",
                str(rec["shared_cells"]),
                "—" if math.isnan(ratio) else f"{ratio:.3f} ({ratio - 1:+.1%})",
                f"{rec['threshold']:.1%} ({basis})" if rec["shared_cells"] else "—",
                rec["verdict"],
            ]
        )
        if rec["slower"]:
            bold.add((i, len(cols) - 1))
    note = (
        "median tok/s vs fastest: the target's output throughput divided by the fastest "
        "target's, at each level measured ok on several targets, median over those levels. "
        f"slower: its shortfall exceeds the threshold, {hc.z:g} standard errors of the "
        f"repeats ({hc.z:g} SE) or, when no level was repeated, {hc.min_difference:.0%} (min.). "
        "Each variant's curve in the answer comes from one target: the one with the most "
        "ok levels of it, ties to the latest."
    )
    return Table(
        "Hosts: one row per target",
        cols,
        rows,
        [False] * 5 + [True, True, False, True, True, True, False],
        note=note,
        highlight=bold,
    )


def host_cells_table(answer: CellAnswer) -> Table | None:
    """Per level measured ok on several targets: each target's numbers and its ratio."""
    hc = answer.hosts
    if hc is None or hc.cells.empty:
        return None
    cols = [
        "variant",
        "concurrency",
        "target",
        "output tok/s",
        "vs fastest",
        "noise (1 SE)",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "in the answer",
        "verdict",
    ]
    rows, bold = [], set()
    for i, rec in enumerate(hc.cells.to_dict("records")):
        noise = rec["noise"]
        rows.append(
            [
                str(rec["variant"]),
                str(rec["concurrency"]),
                str(rec["target"]),
                num(rec["output_throughput"]),
                _pct(rec["ratio"] - 1),
                "—" if pd.isna(noise) else f"±{noise:.1%}",
                num(rec["ttft_ms_p50"], ".2f"),
                num(rec["ttft_ms_p99"], ".2f"),
                num(rec["itl_ms_p50"], ".2f"),
                "yes" if rec["in_answer"] else "no",
                rec["verdict"],
            ]
        )
        if rec["verdict"] == "slower":
            bold.add((i, len(cols) - 1))
    return Table(
        "Levels measured on several targets",
        cols,
        rows,
        [False, True, False, True, True, True, True, True, True, False, False],
        note="Latency in ms. vs fastest: output throughput relative to the fastest target at "
        "that level; noise: standard error of that ratio from the repeats (— when unknown).",
        highlight=bold,
    )


def left_out_table(answer: CellAnswer) -> Table | None:
    """Rows of a variant on a target the answer did not use (a partial or earlier measurement)."""
    hc = answer.hosts
    if hc is None or hc.left_out.empty:
        return None
    keys = ["variant", "target", "ok_levels", "failed_levels", "used_instead"]
    rows = [[str(r[k]) for k in keys] for r in hc.left_out.to_dict("records")]
    return Table(
        "Rows left out of the answer",
        ["variant", "target", "ok levels", "failed levels", "the answer uses"],
        rows,
        [False, False, True, True, False],
        note="These levels are not in the throughput, pivot or policy above (nor in the "
        "failures): another target measured the variant more fully.",
    )


def host_tables(answer: RunAnswer) -> list[Table]:
    """The Hosts section's tables (the fleet's plan, then the first cell's targets); empty
    for a run on a single target."""
    tables = [
        calibration_table(answer),
        hosts_table(answer.first),
        host_cells_table(answer.first),
        left_out_table(answer.first),
    ]
    return [t for t in tables if t is not None]


def calibration_table(answer: RunAnswer) -> Table | None:
    """One row per fleet host: its GPU kind, role, whose baseline it used, its calibration."""
    plans = plans_in_order(answer)
    if plans.empty:
        return None
    cols = [
        "host",
        "GPU kind",
        "role",
        "baseline used",
        "calibration level",
        "its baseline vs reference",
        "tolerance",
        "verdict",
    ]
    rows = []
    for rec in plans.to_dict("records"):
        level = rec.get("calibration_concurrency")
        shape = rec.get("calibration_shape")
        tol = rec.get("tolerance")
        rows.append(
            [
                str(rec["target"]),
                str(rec.get("gpu_kind") or "unknown"),
                ROLE_TEXT.get(rec["role"], rec["role"]),
                str(rec.get("baseline_target") or "—"),
                "—" if level is None or pd.isna(level) else f"c={int(level)} {shape or ''}".strip(),
                calibration_text(rec),
                "—" if tol is None or pd.isna(tol) else f"±{tol:.0%}",
                verdict_text(rec),
            ]
        )
    note = (
        "A calibrated host measures the baseline at one level; it passes when its throughput "
        "there is within the tolerance of its reference's and the ratio's 95% interval "
        "includes parity. Then its variants are divided by the reference's baseline; "
        "otherwise it measures its own and its variants are divided by that, then put on the "
        "reference's scale (their intervals carry both of its sides)."
    )
    return Table(
        "Baselines: one row per fleet host",
        cols,
        rows,
        [False, False, False, False, False, True, True, False],
        note=note,
    )
