"""Text a person reads on an artifact page (specsweep/report/prose.py): sentences with their
full stops, and no word of the prose too long for the UI's column (a break opportunity,
<wbr>, after its punctuation); code blocks, tables and data: URIs left whole. The browser
check of the same pages is tests/e2e/test_ui_form.py's check_text_blocks."""

from __future__ import annotations

import json
import re

import pytest

from specsweep.analysis.answer import analyze_run
from specsweep.report.artifacts import answer_page, report_page
from specsweep.report.prose import BREAK, LONG_WORD, fit_text, paragraph
from specsweep.report.tables import export_table
from specsweep.results.store import ResultsStore
from tests.synthetic_levels import baseline_tput, chain_row, level_row, write

ENV = {  # the e2e sweep's server env: its JSON, 150 characters without a space
    "SPECSWEEP_SIM_GPU_STATE": "work/simgpus",
    "SPECSWEEP_SIM_LOAD_SECONDS": "0.3",
    "SPECSWEEP_SIM_TIME_SCALE": "0.05",
    "SPECSWEEP_SIM_WARMUP_SECONDS": "0.3",
}
JSON = json.dumps(ENV, separators=(",", ":"), sort_keys=True)
RUN = "20261107T000000Z-prose"


def shown(markdown: str) -> str:
    """The page's text as a reader sees it: code spans cut apart joined again, <wbr> gone."""
    return markdown.replace(f"`{BREAK}`", "").replace(BREAK, "")


def prose_words(markdown: str) -> list[str]:
    """Every word of the page outside fenced code and tables, its link targets left out,
    cut at its break opportunities and code span edges."""
    words, fence = [], False
    for line in markdown.split("\n"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and not line.startswith("|"):
            line = re.sub(r"\]\([^)]*\)", "]", line)
            # a browser breaks a line at <wbr>, a code span's edge and after a hyphen
            # before a letter (fit_text counts the last as a break the page already has)
            words += [
                w for word in line.split() for w in re.split(f"{BREAK}|`|(?<=-)(?=[A-Za-z])", word)
            ]
    return words


def test_paragraph_ends_every_sentence_with_a_full_stop():
    notes = ["tiers for EAGLE3 (run r)", "max_bs 256 (x)", "c=8: tier [0] untraced", "done."]
    assert paragraph(*notes, "", "  ") == (
        "Tiers for EAGLE3 (run r). max_bs 256 (x). c=8: tier [0] untraced. Done."
    )  # a name (max_bs, c=8) keeps its case


def test_a_long_word_breaks_after_its_punctuation_and_reads_the_same():
    line = f"tiers for EAGLE3 draft d env {JSON} (run r; max_bs 256)."
    fitted = fit_text(line)
    assert fitted != line and shown(fitted) == line
    pieces = fitted.split(" env ")[1].split(" (run")[0].split(BREAK)
    assert len(pieces) > 1 and all(len(p) <= LONG_WORD for p in pieces)
    assert all(p[-1] in ",;/=:" for p in pieces[:-1])  # cut after punctuation only
    assert fit_text(fitted) == fitted  # once is enough


def test_short_words_urls_and_words_without_punctuation_are_left_whole():
    token = "hf_" + "0123456789abcdef" * 4  # no punctuation: nothing to break after
    text = f"eagle3-s2-k1-d3-v2-x1a2b3c at https://example.com/{'a/' * 30}x and {token}."
    assert fit_text(text) == text


def test_code_blocks_tables_and_data_uris_are_left_whole():
    page = "\n".join(
        [
            "```json",
            JSON,
            "```",
            f"| env | {JSON} |",
            "|---|---|",
            f"![speedup](data:image/png;base64,{'A/B=' * 40})",
            "    " + JSON,  # indented code
        ]
    )
    assert fit_text(page) == page


def test_a_long_code_span_is_cut_into_adjacent_spans():
    path = "/tmp/pytest_of_root/pytest_12/prefect_e2e0/project/results/reports/ui_run/report.html"
    line = f"As one HTML file: `{path}` on vm, and `short/path`."
    fitted = fit_text(line)
    assert f"`{BREAK}`" in fitted and shown(fitted) == line
    assert "`short/path`" in fitted
    assert max(len(w) for w in prose_words(fitted)) <= LONG_WORD


def test_headings_list_items_and_quotes_are_prose():
    for prefix in ("### ", "- ", "> ", "  - "):
        fitted = fit_text(f"{prefix}x {JSON}")
        assert fitted.startswith(prefix) and BREAK in fitted


@pytest.fixture(scope="module")
def answer(tmp_path_factory):
    """Two chains against the baseline, simulated with the e2e sweep's env: an export
    whose note names that env."""
    rows = []
    for c in (1, 2, 4, 8, 16, 32):
        b = baseline_tput(c)
        sim = {"simulated": True, "backend": "simulator", "env": json.dumps(ENV, sort_keys=True)}
        rows.append(level_row(RUN, "baseline", c, b, **sim))
        for s in (2, 3):
            rows.append(chain_row(RUN, s, c, b * (1.3 - 0.02 * s * (1 + c.bit_length())), **sim))
    store = ResultsStore(tmp_path_factory.mktemp("prose"))
    write(store, rows)
    return analyze_run(store, RUN)


def test_the_tiers_note_is_sentences_each_with_its_full_stop(answer):
    note = export_table(answer.first).note
    sentences = re.split(r"(?<=\.) (?=[A-Za-z])", note)
    assert len(sentences) >= 4, note
    assert all(s.endswith(".") for s in sentences), note
    assert "verify_policy.pinned_zero. " in note and "keep its tier: extrapolated. " in note


def test_no_word_of_the_artifact_pages_prose_is_longer_than_the_column_allows(answer, tmp_path):
    from specsweep.report.render import write_report

    files = write_report(answer, tmp_path / "report", inline=True)
    for page in (answer_page(answer, files, None, "specsweep-report"), report_page(answer, files)):
        assert JSON.replace(",", ", ") not in page  # the env as it is stored, not reworded
        (note,) = [line for line in page.split("\n") if line.startswith("Tiers for EAGLE3")]
        assert BREAK in note and JSON in shown(note)
        long = [w for w in prose_words(page) if len(w) > LONG_WORD]
        assert not long, long
