"""The decision as every view shows it: its headline, its per-level table, its config.

One renderer of analysis/decision.py's objects for the CLI, the report and the Prefect
artifacts, so they say the same thing in the same words; none of them picks a winner.
"""

from __future__ import annotations

import math

from specsweep.analysis.answer import RunAnswer
from specsweep.analysis.decision import CellDecision, LevelEffect
from specsweep.analysis.tie_rule import LevelJudgment

DECISION_COLUMNS = ["c", "deploy runs", "vs no speculation", "best measured", "level"]


def headline_lines(answer: RunAnswer) -> list[str]:
    """The first cell's three lines: what to deploy, what it measured, the verdict."""
    return answer.first.decision.headline()


def headline_text(answer: RunAnswer) -> str:
    """The headline as one paragraph (for places that hold a single line)."""
    return " ".join(headline_lines(answer))


def _pm(effect: LevelEffect) -> str:
    r = effect.vs_baseline
    if not math.isfinite(r.value):
        return "—"
    if r.value == 1.0 and r.lo == 1.0:
        return "±0"
    text = f"{r.value - 1:+.1%}"
    if r.known and math.isfinite(r.hi) and r.value:
        text += f" ±{(r.hi - r.lo) / 2 / r.value:.1%}"
    return text


def _level_text(j: LevelJudgment | None) -> str:
    if j is None:
        return "—"
    if j.status == "clear":
        return "clear"
    if j.status == "tie":
        return "best, others within noise" if j.choice == j.best else f"tie within {j.margin:.0%}"
    r = j.rival_ratio
    half = f" ±{(r.hi - r.lo) / 2 / r.value:.0%}" if r.known and math.isfinite(r.hi) else ""
    return f"open: {j.rival} {r.value - 1:+.1%}{half}"


def decision_rows(decision: CellDecision) -> list[list[str]]:
    """One row per measured level: what the deployed config runs, its measured effect,
    the best measured config there and how the level was decided."""
    rows = []
    judged = {j.concurrency: j for j in decision.judgments}
    for e in decision.deploy.effects:
        j = judged.get(e.concurrency)
        rows.append([str(e.concurrency), e.runs, _pm(e), j.best if j else "—", _level_text(j)])
    return rows


def deploy_blocks(decision: CellDecision) -> list[str]:
    """Markdown: the SGLang tier file and the exact server command, in code blocks a
    person copies from (the UI keeps them whole: a code block scrolls, prose would wrap)."""
    out: list[str] = []
    deploy = decision.deploy
    if deploy.sglang_json:
        out += [
            "SGLang adaptive tier file (`--speculative-adaptive-config tiers.json`):",
            "",
            "```json",
            deploy.sglang_json,
            "```",
            "",
        ]
    if deploy.command:
        what = "Launch command" if deploy.kind == "tiers" else f"Launch command of {deploy.variant}"
        out += [f"{what}:", "", "```bash", deploy.command, "```", ""]
    for variant, command in deploy.commands:
        out += [f"Launch command of {variant}:", "", "```bash", command, "```", ""]
    return out


def decision_markdown(answer: RunAnswer) -> list[str]:
    """The decision at the top of an artifact or report: the headline, the config to copy,
    the per-level table, the sentences of the levels that were not clear; then each other
    cell's headline."""
    first, *others = answer.decisions.cells
    lines = [f"**{line}**" + "  " for line in first.headline()]
    lines[-1] = lines[-1].rstrip()
    lines.append("")
    lines += deploy_blocks(first)
    lines += [
        "| " + " | ".join(DECISION_COLUMNS) + " |",
        "|---:|---|---:|---|---|",
        *("| " + " | ".join(r) + " |" for r in decision_rows(first)),
        "",
    ]
    lines += [f"- {s}." for s in first.level_sentences()]
    lines += [f"- {n[0].upper()}{n[1:].rstrip('.')}." for n in first.deploy.notes if n]
    if first.level_sentences() or first.deploy.notes:
        lines.append("")
    for other in others:
        lines += [f"**{line}**  " for line in other.headline()]
        lines.append("")
    return lines
