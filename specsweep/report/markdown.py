"""The summary as Markdown: for Prefect artifacts, logs and CI job summaries."""

from __future__ import annotations

from specsweep.analysis.summary import Summary


def _fmt(value: float) -> str:
    return "—" if value != value else f"{value:,.1f}"  # NaN -> dash


def summary_markdown(
    run_id: str,
    summary: Summary,
    variant_errors: dict[str, str],
    notes: list[str] | None = None,
) -> str:
    """``notes``: lines said after the tables (the GPUs' memory before and after)."""
    lines = [f"## specsweep run `{run_id}`", ""]
    if summary.throughput.empty:
        lines.append("No level completed successfully.")
    else:
        table = summary.throughput
        lines.append("Output throughput (tok/s) per variant and concurrency:")
        lines.append("")
        lines.append("| concurrency | " + " | ".join(table.columns) + " |")
        lines.append("|---:|" + "---:|" * len(table.columns))
        for c, row in table.iterrows():
            lines.append(f"| {c} | " + " | ".join(_fmt(v) for v in row.to_numpy()) + " |")
        lines += ["", "Best per level:", ""]
        lines.append("| concurrency | best variant | tok/s | speedup vs baseline |")
        lines.append("|---:|---|---:|---:|")
        for rec in summary.best.to_dict("records"):
            speedup = rec.get("speedup")
            sp = f"{speedup:.2f}x" if speedup is not None and speedup == speedup else "—"
            lines.append(
                f"| {rec['concurrency']} | {rec['best_variant']} | "
                f"{_fmt(rec['best_throughput'])} | {sp} |"
            )
    if not summary.failed_levels.empty:
        lines += ["", "Failed levels:", ""]
        for rec in summary.failed_levels.to_dict("records"):
            lines.append(f"- {rec['variant']} c={rec['concurrency']}: {rec['error']}")
    if variant_errors:
        lines += ["", "Failed variants:", ""]
        lines += [f"- {name}: {error}" for name, error in variant_errors.items()]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
