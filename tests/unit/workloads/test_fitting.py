"""fit_prompt brings real prompts to a shape's length with distinct filler in front;
check_workload refuses what cannot run, before any launch."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specsweep.config import LoadSpec
from specsweep.workloads import (
    DatasetError,
    PromptRecord,
    Workload,
    category_of,
    check_workload,
    estimate_tokens,
    fit_prompt,
    load_builtin,
)
from specsweep.workloads.fitting import SEPARATOR


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 1
    assert estimate_tokens("a b c d e") == 5  # short words: one token each
    assert estimate_tokens("x" * 400) == 100  # long runs: four characters a token
    assert estimate_tokens("internationalisation considerations") == 9


@pytest.mark.parametrize("input_len", [512, 4096, 32768])
def test_fitted_prompts_reach_the_length_and_keep_their_end(input_len: int) -> None:
    pool = load_builtin()
    rng = random.Random(input_len)
    for record in pool.records[::7]:
        assert record.text is not None
        fitted = fit_prompt(record.text, input_len, pool, rng)
        assert abs(estimate_tokens(fitted) - input_len) <= max(1, input_len // 50)
        assert estimate_tokens(fitted) == input_len  # exact for the bundled set
        assert fitted.endswith(SEPARATOR + record.text)
        assert category_of(fitted) == record.category


def test_fitted_prompts_start_differently() -> None:
    """The prefix cache must not serve the filler: starts differ within a few words."""
    pool = load_builtin()
    rng = random.Random(0)
    text = pool.records[0].text
    assert text is not None
    fitted = [fit_prompt(text, 4096, pool, rng) for _ in range(200)]
    starts = {f[:40] for f in fitted}
    assert len(starts) >= 195  # (two may start at the same word by chance)
    assert len({f[:400] for f in fitted}) == 200
    # ... and the filler is other prompts, not this one.
    assert all(f.count(text) == 1 for f in fitted)


def test_fitting_is_reproducible() -> None:
    pool = load_builtin()
    text = pool.records[100].text
    assert text is not None
    a = fit_prompt(text, 2000, pool, random.Random(5))
    assert a == fit_prompt(text, 2000, pool, random.Random(5))
    assert a != fit_prompt(text, 2000, pool, random.Random(6))


def test_long_prompts_lose_their_start() -> None:
    pool = load_builtin()
    record = next(r for r in pool.records if r.category == "summarisation")
    assert record.text is not None
    for input_len in (16, 50, 200):
        cut = fit_prompt(record.text, input_len, pool, random.Random(0))
        assert record.text.endswith(cut) and not cut[0].isspace()
        assert input_len - 2 <= estimate_tokens(cut) <= input_len
    assert fit_prompt(record.text, estimate_tokens(record.text), pool, random.Random(0)) == (
        record.text
    )


def test_a_pool_of_one_fills_with_itself_and_long_words_are_cut() -> None:
    text = "Why is this so?"
    pool = Workload("jsonl", "one.jsonl", (PromptRecord(text, None, None, None, 1),))
    fitted = fit_prompt(text, 100, pool, random.Random(1))
    assert estimate_tokens(fitted) == 100 and fitted.endswith("\n\nWhy is this so?")
    word = "x" * 4000  # one 1000-token "word"
    pool = Workload("jsonl", "w.jsonl", (PromptRecord(word, None, None, None, 1),
                                         PromptRecord(text, None, None, None, 2)))  # fmt: skip
    assert estimate_tokens(fit_prompt(text, 300, pool, random.Random(1))) == 300
    with pytest.raises(ValueError, match="input_len"):
        fit_prompt(text, 0, pool, random.Random(1))


def write(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_check_workload_loads_and_validates(tmp_path: Path) -> None:
    assert check_workload(LoadSpec(), 4096) is None
    assert check_workload(LoadSpec(prompts="builtin"), None) is load_builtin()
    assert check_workload(LoadSpec(prompts="builtin", input_len=[512, 8192]), 32768) is not None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n{oops\n')
    with pytest.raises(DatasetError, match="line 2: not valid JSON"):
        check_workload(LoadSpec(dataset=bad), None)


def test_check_workload_fit_checks_the_shapes(tmp_path: Path) -> None:
    load = LoadSpec(prompts="builtin", input_len=[1024, 32000], output_len=1024)
    with pytest.raises(
        DatasetError,
        match=r"builtin: shape in32000-out1024 \(every prompt is fitted to it\): 32000 prompt "
        r"\+ 1024 output tokens exceed the server's context length 32768",
    ):
        check_workload(load, 32768)
    assert check_workload(load, 33024) is not None


def test_check_workload_natural_checks_each_record(tmp_path: Path) -> None:
    long_text = "a " * 40123  # 40123 one-letter words: 40123 tokens
    path = write(
        tmp_path / "d.jsonl",
        {"prompt": "short one"},
        {"prompt": "short two", "output_len": 100},
        {"prompt": long_text},
    )
    load = LoadSpec(dataset=path, prompt_length="natural", output_len=256)
    with pytest.raises(
        DatasetError,
        match=r"d\.jsonl: line 3: 40123 prompt \+ 256 output tokens exceed the server's "
        r"context length 32768",
    ):
        check_workload(load, 32768)
    own = LoadSpec(dataset=path, prompt_length="natural", output_len=16)
    with pytest.raises(DatasetError, match="line 2: 2 prompt \\+ 100 output tokens"):
        check_workload(own, 50)  # line 2's own output_len
    assert check_workload(load, 40123 + 256) is not None


def test_check_workload_replay(tmp_path: Path) -> None:
    path = write(
        tmp_path / "r.jsonl",
        {"input_len": 1000, "output_len": 200},
        {"input_len": 30000, "output_len": 3000},
    )
    with pytest.raises(DatasetError, match="line 2: 30000 prompt \\+ 3000 output tokens"):
        check_workload(LoadSpec(dataset=path), 32768)
    assert check_workload(LoadSpec(dataset=path), 33000) is not None
    with pytest.raises(DatasetError, match="a replay sends every request at its recorded"):
        check_workload(LoadSpec(dataset=path, output_len=[128, 256]), None)
