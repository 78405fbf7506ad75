"""The bundled prompt set: its size, categories and ids, and that category_of knows it."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from specsweep.loadgen.prompts import make_text_prompts
from specsweep.workloads import CATEGORIES, RANDOM_WORDS, category_of, fit_prompt, load_builtin
from specsweep.workloads.bundled import builtin_ids, builtin_text
from specsweep.workloads.categories import SUFFIX_CHARS

BUILTIN = Path(__file__).resolve().parents[3] / "specsweep" / "workloads" / "builtin"


def test_the_set_is_large_balanced_and_well_formed() -> None:
    workload = load_builtin()
    assert workload.kind == "builtin" and workload.label == "builtin"
    assert len(workload.records) >= 200
    counts = Counter(r.category for r in workload.records)
    assert set(counts) == set(CATEGORIES) and workload.categories == CATEGORIES
    assert min(counts.values()) >= 50
    ids = builtin_ids()
    assert len(ids) == len(set(ids)) == len(workload.records)
    assert all(i.startswith(f"{r.category}-") for i, r in zip(ids, workload.records, strict=True))
    texts = [r.text for r in workload.records]
    assert all(t is not None and t.strip() == t and t for t in texts)
    assert len(set(texts)) == len(texts)
    assert all(r.input_len is None and r.output_len is None for r in workload.records)


def test_every_line_has_exactly_the_documented_keys() -> None:
    for line in builtin_text().splitlines():
        assert set(json.loads(line)) == {"id", "category", "prompt"}


def test_summarisation_prompts_end_with_their_instruction() -> None:
    for r in load_builtin().records:
        if r.category == "summarisation":
            assert r.text is not None
            passage, _, instruction = r.text.rpartition("\n\n")
            assert 120 <= len(passage.split()) <= 350
            assert "summar" in instruction.lower() and len(instruction) < 200


def test_the_readme_states_the_counts_and_the_licence() -> None:
    readme = (BUILTIN / "README.md").read_text()
    assert "CC0-1.0" in readme and "Apache-2.0" in readme
    counts = Counter(r.category for r in load_builtin().records)
    for category, n in counts.items():
        assert f"| `{category}`" in readme and f"|      {n} |" in readme


def test_suffixes_identify_a_category() -> None:
    """No two categories share a prompt ending: category_of reads only the end."""
    seen: dict[str, str | None] = {}
    for r in load_builtin().records:
        assert r.text is not None and len(r.text) >= SUFFIX_CHARS
        key = r.text[-SUFFIX_CHARS:]
        assert seen.setdefault(key, r.category) == r.category


def test_category_of_recognises_every_bundled_prompt_alone_and_fitted() -> None:
    workload = load_builtin()
    rng = random.Random(7)
    for r in workload.records:
        assert r.text is not None
        assert category_of(r.text) == r.category
        assert category_of(r.text + "\n") == r.category
        for input_len in (64, 1024):
            fitted = fit_prompt(r.text, input_len, workload, rng)
            assert category_of(fitted) == r.category


@pytest.mark.parametrize("n", [1, 5, 300, 5000])
def test_random_words_are_random(n: int) -> None:
    for text in make_text_prompts(3, n, seed=n):
        assert category_of(text) == "random"
    assert category_of(" ".join(RANDOM_WORDS)) == "random"


@pytest.mark.parametrize(
    "text",
    [
        "What is the capital of France?",
        "time year people way banana",  # one word not from the vocabulary
        "",
        "   ",
        "Summarise the passage above in three sentences.",  # the end of a prompt, not one
    ],
)
def test_other_text_is_text(text: str) -> None:
    assert category_of(text) == "text"


def test_a_bundled_prompt_after_user_text_is_still_recognised() -> None:
    r = load_builtin().records[-1]
    assert r.text is not None
    assert category_of("anything at all\n\n" + r.text) == r.category
    assert category_of(r.text + " And one more thing.") == "text"
