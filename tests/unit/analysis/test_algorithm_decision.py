"""Issue 31, item 4: the answer covers algorithms. Where the levels choose more than one
algorithm, the decision deploys each level's own choice (one server runs one algorithm);
SGLang's adaptive tiers are deployed only where they can run every level's choice; the
categories table reads acceptance from the streamed chunks where the endpoint reports
none."""

from __future__ import annotations

import pandas as pd
import pytest

from specsweep.analysis.answer import analyze
from specsweep.analysis.decision import by_level_rule
from specsweep.analysis.shapes import category_table, verify_caps
from specsweep.report.decision_view import decision_markdown
from specsweep.report.render import adaptive_lines
from specsweep.report.tables import policy_table
from tests.synthetic_levels import baseline_tput, chain_row, frame, level_row

RUN = "20261203T000000Z-algos"
LEVELS = [1, 2, 4, 8, 16]
HALF = 0.003  # every level's relative half-width: differences of 2% and more are real


def _ngram(c: int, t: float) -> dict:
    return level_row(
        RUN, "ngram-w10-d8", c, t, algorithm="NGRAM", num_steps=7, topk=10, num_draft_tokens=8,
        server_command="python -m sglang.launch_server --speculative-algorithm NGRAM",
    )  # fmt: skip


def _dflash(c: int, t: float) -> dict:
    return level_row(
        RUN, "dflash-b8", c, t, algorithm="DFLASH", num_steps=1, topk=1, num_draft_tokens=8,
        server_command="python -m sglang.launch_server --speculative-algorithm DFLASH",
    )  # fmt: skip


def _rows(ngram: list[float], chains: dict[int, list[float]], dflash: list[float] | None = None):
    rows = []
    for i, c in enumerate(LEVELS):
        t = baseline_tput(c)
        rows.append(level_row(RUN, "baseline", c, t))
        rows.append(_ngram(c, t * ngram[i]))
        for steps, r in chains.items():
            rows.append(chain_row(RUN, steps, c, t * r[i], algorithm="EAGLE3"))
        if dflash is not None:
            rows.append(_dflash(c, t * dflash[i]))
    for r in rows:
        r["output_throughput_lo"] = r["output_throughput"] * (1 - HALF)
        r["output_throughput_hi"] = r["output_throughput"] * (1 + HALF)
    return frame(rows)


def test_two_algorithms_chosen_deploy_each_levels_own_choice_not_the_tiers():
    # NGRAM clearly best at c=1, 2; EAGLE3 2 steps at c=4, 8; no speculation at c=16
    chains = {2: [1.3, 1.25, 1.2, 1.1, 0.9], 4: [1.2, 1.1, 1.1, 0.9, 0.8]}
    answer = analyze(_rows([1.6, 1.4, 1.0, 0.8, 0.7], chains), RUN)
    assert answer.first.export is not None  # the chains alone still export (policy export)
    d = answer.first.decision
    assert d.choice_at() == {
        1: "ngram-w10-d8", 2: "ngram-w10-d8", 4: "eagle3-s2-k1-d3", 8: "eagle3-s2-k1-d3",
        16: "baseline",
    }  # fmt: skip
    assert d.deploy.kind == "by-level"
    assert d.deploy.runs_at() == d.choice_at()
    assert d.deploy.rule == (
        "by level: ngram-w10-d8 up to c=2, then eagle3-s2-k1-d3 up to c=8, then no speculation"
    )
    assert d.headline()[0] == (
        "Deploy by level: ngram-w10-d8 up to c=2, then eagle3-s2-k1-d3 up to c=8, then no "
        "speculation."
    )
    assert d.deploy.up_to == 8
    assert [v for v, _ in d.deploy.commands] == ["ngram-w10-d8", "eagle3-s2-k1-d3"]
    notes = " ".join(d.deploy.notes)
    assert "one SGLang server runs one speculative algorithm" in notes
    assert "tiers of the EAGLE3 chains are not deployed" in notes
    assert "ngram-w10-d8 (chosen at c=1, 2)" in notes
    # the single-server rule is still said: one variant up to one level
    assert answer.first.policy.variant in ("ngram-w10-d8", "eagle3-s2-k1-d3")
    # the export's line says what its tiers leave out
    (exportable,) = [ln for ln in adaptive_lines(answer) if ln.startswith("Exportable")]
    assert "The tiers choose among the EAGLE3 chains only; ngram-w10-d8 cannot be tiers" in (
        exportable
    )
    assert answer.first.policy.rule() in notes
    text = "\n".join(decision_markdown(answer))
    assert "Launch command of ngram-w10-d8" in text and "Launch command of eagle3-s2-k1-d3" in text
    assert "| 1 | ngram-w10-d8 |" in text and "| 4 | eagle3-s2-k1-d3 |" in text
    policy = policy_table(answer.first)
    assert policy is not None and policy.rows[0][0].startswith("with one server: ")
    assert "the decision deploys by level: ngram-w10-d8 up to c=2" in (policy.note or "")


def test_chains_chosen_everywhere_still_deploy_the_tiers():
    # NGRAM measured but never chosen: the tiers run every level's choice
    chains = {2: [1.3, 1.25, 1.2, 1.1, 0.9], 4: [1.5, 1.3, 1.1, 0.9, 0.8]}
    answer = analyze(_rows([1.1, 1.0, 0.9, 0.8, 0.7], chains), RUN)
    d = answer.first.decision
    assert d.deploy.kind == "tiers"
    assert d.headline()[0].startswith("Deploy SGLang adaptive tiers")


def test_one_other_algorithm_chosen_is_the_static_rule_and_says_why_not_tiers():
    # NGRAM best up to c=4, the chains never chosen: "X up to c=N" with the tiers refused
    answer = analyze(_rows([1.6, 1.4, 1.2, 0.9, 0.8], {2: [1.3, 1.2, 1.1, 0.9, 0.8]}), RUN)
    d = answer.first.decision
    assert d.deploy.kind == "static"
    assert d.deploy.rule == "ngram-w10-d8 up to c=4, then no speculation"
    assert any("cannot run ngram-w10-d8 (chosen at c=1, 2, 4)" in n for n in d.deploy.notes)


def test_three_algorithms_without_chains_deploy_by_level():
    # no EAGLE chain at all (no tiers to export): DFLASH at c=1, 2, NGRAM at c=4, 8
    rows = _rows([1.2, 1.2, 1.3, 1.1, 0.9], {}, dflash=[1.6, 1.4, 1.1, 0.9, 0.8])
    answer = analyze(rows, RUN)
    assert answer.first.export is None
    d = answer.first.decision
    assert d.deploy.rule == (
        "by level: dflash-b8 up to c=2, then ngram-w10-d8 up to c=8, then no speculation"
    )
    assert d.deploy.switch_at is not None and 8 < d.deploy.switch_at < 16


def test_by_level_rule_names_no_speculation_between_and_a_speculating_top():
    choices = {1: "a", 2: "baseline", 4: "b", 8: "b"}
    assert by_level_rule(choices, "baseline") == (
        "a up to c=1, then no speculation up to c=2, then b up to c=8"
    )


@pytest.mark.parametrize("interval, read", [(None, True), (1, True), (2, False)])
def test_acceptance_per_category_from_chunks_where_the_endpoint_reports_none(interval, read):
    flag = "" if interval is None else f" --stream-interval {interval}"
    levels = frame(
        [
            level_row(RUN, "baseline", 1, 100.0),
            _ngram(1, 150.0) | {"server_command": "python -m sglang.launch_server" + flag},
        ]
    )
    caps = verify_caps(levels)
    assert caps == ({"ngram-w10-d8": 8} if read else {})
    requests = pd.DataFrame(
        {
            "variant": ["baseline", "ngram-w10-d8", "ngram-w10-d8", "ngram-w10-d8"],
            "concurrency": [1, 1, 1, 1],
            "shape": [None] * 4,
            "category": ["code", "code", "code", "chat"],
            "error": [None] * 4,
            "tpot_ms": [10.0, 5.0, 5.0, 8.0],
            "spec_accept_length": [None] * 4,
            # first chunk: the prefill's token; last: cut at max_tokens
            "chunk_tokens": [[1, 1, 1, 1], [1, 3, 4, 2], [1, 2, 3, 1], [1, 1, 2, 1, 1]],
        }
    )
    table = category_table(requests, caps).set_index(["variant", "category"])
    assert pd.isna(table.at[("baseline", "code"), "accept_length"])
    if read:
        assert table.at[("ngram-w10-d8", "code"), "accept_length"] == pytest.approx(3.0)
        assert table.at[("ngram-w10-d8", "chat"), "accept_length"] == pytest.approx(4 / 3)
    else:
        assert pd.isna(table.at[("ngram-w10-d8", "code"), "accept_length"])
