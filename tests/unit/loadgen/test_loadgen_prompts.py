"""Prompts are exact-length, avoid special ids, and are reproducible per level and pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsweep.config import LoadSpec
from specsweep.loadgen.client import PreparedRequest
from specsweep.loadgen.payloads import RequestFactory
from specsweep.loadgen.prompts import (
    MIN_TOKEN_ID,
    level_seed,
    make_input_ids,
    make_text_prompts,
    pick_in_order,
    pick_shuffled,
    stratified_order,
)
from specsweep.workloads import RANDOM_WORDS


def test_exact_length_and_range() -> None:
    prompts = make_input_ids(5, 37, seed=1, vocab_size=1000)
    assert len(prompts) == 5
    assert all(len(p) == 37 for p in prompts)
    assert all(MIN_TOKEN_ID <= t < 1000 for p in prompts for t in p)
    assert len({tuple(p) for p in prompts}) == 5


def test_deterministic_per_seed() -> None:
    assert make_input_ids(3, 8, seed=7) == make_input_ids(3, 8, seed=7)
    assert make_input_ids(3, 8, seed=7) != make_input_ids(3, 8, seed=8)
    # A longer list extends a shorter one: request i gets the same prompt.
    assert make_input_ids(4, 8, seed=7)[:3] == make_input_ids(3, 8, seed=7)


def test_level_seeds_differ() -> None:
    seeds = {level_seed(0, c) for c in (1, 2, 4, 8)} | {level_seed(1, c) for c in (1, 2, 4, 8)}
    assert len(seeds) == 8
    assert level_seed(0, 4, warmup=True) != level_seed(0, 4)


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        make_input_ids(1, 0, seed=0)
    with pytest.raises(ValueError):
        make_input_ids(1, 4, seed=0, vocab_size=50)


def test_pass_seeds_differ_and_pass_zero_is_unchanged() -> None:
    assert level_seed(0, 4, repeat=0) == level_seed(0, 4) == 4
    seeds = {level_seed(0, 4, repeat=r) for r in range(5)}
    seeds |= {level_seed(0, 4, repeat=r, warmup=True) for r in range(5)}
    assert len(seeds) == 10


def test_text_prompts() -> None:
    prompts = make_text_prompts(4, 50, seed=2)
    assert [len(p.split()) for p in prompts] == [50] * 4
    assert all(w in RANDOM_WORDS for p in prompts for w in p.split())
    assert len(set(prompts)) == 4
    assert make_text_prompts(4, 50, seed=2) == prompts
    assert make_text_prompts(4, 50, seed=3) != prompts


def write_sharegpt(path: Path, n: int) -> Path:
    data = [
        {
            "conversations": [
                {"from": "human", "value": f"question {i}"},
                {"from": "gpt", "value": "a"},
            ]
        }
        for i in range(n)
    ]
    data.append({"conversations": [{"from": "gpt", "value": "no human turn"}]})
    data.append({"conversations": [{"from": "human", "value": "   "}]})
    data.append({"id": "no conversations"})
    path.write_text(json.dumps(data))
    return path


def test_shuffled_picks_are_deterministic_and_passes_do_not_overlap() -> None:
    prompts = tuple(f"p{i}" for i in range(10))
    first = pick_shuffled(prompts, seed=1, count=4, offset=0)
    second = pick_shuffled(prompts, seed=1, count=4, offset=4)
    assert first == pick_shuffled(prompts, seed=1, count=4)
    assert not set(first) & set(second)
    assert pick_shuffled(prompts, seed=2, count=10) != pick_shuffled(prompts, seed=1, count=10)
    assert len(pick_shuffled(prompts, seed=1, count=25)) == 25  # wraps around


def test_a_stratified_order_holds_every_stratum_in_proportion_along_its_length() -> None:
    """Any run of consecutive items holds each stratum within one item of its share;
    equal strata give exact shares in runs of a multiple of their count, wrapping too."""
    strata = ["a"] * 10 + ["b"] * 30 + ["c"] * 7
    order = stratified_order(strata, seed=3)
    assert sorted(order) == list(range(len(strata)))  # a permutation
    assert order == stratified_order(strata, seed=3) != stratified_order(strata, seed=4)
    for start in range(len(order)):
        for length in (5, 12, 20, 33):
            run = [strata[order[(start + i) % len(order)]] for i in range(length)]
            for s, size in (("a", 10), ("b", 30), ("c", 7)):
                assert abs(run.count(s) - length * size / len(strata)) <= 2, (start, length)
    even = [c for c in "wxyz" for _ in range(60)]
    for seed in range(5):
        for offset in range(0, 240, 4):
            run = pick_shuffled(even, seed, 128, offset, strata=even)
            assert {run.count(c) for c in "wxyz"} == {32}
    plain = pick_shuffled(even, 0, 128)  # unstratified: the mix is a draw
    assert {plain.count(c) for c in "wxyz"} != {32}


def test_in_order_picks_wrap() -> None:
    assert pick_in_order("abcd", 6, offset=3) == ["d", "a", "b", "c", "d", "a"]


def body_of(req: PreparedRequest) -> dict:
    head, _, body = req.wire.partition(b"\r\n\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    return json.loads(body)


def test_generate_bodies_exact_and_distinct_per_pass() -> None:
    load = LoadSpec(input_len=12, output_len=7, requests_per_level=3, seed=5)
    f = RequestFactory("http://127.0.0.1:1/prefix", 2, load)
    assert f.path == "/prefix/generate"
    p0, p1, warm = f.measured(0), f.measured(1), f.warmup()
    assert [len(x) for x in (p0, p1, warm)] == [3, 3, 2]
    b = body_of(p0[0])
    assert b["sampling_params"] == {"max_new_tokens": 7, "temperature": 0.0, "ignore_eos": True}
    assert b["stream"] is True and len(b["input_ids"]) == 12 and p0[0].prompt_tokens == 12
    assert b["input_ids"] == make_input_ids(3, 12, level_seed(5, 2))[0]
    ids = [tuple(body_of(r)["input_ids"]) for r in p0 + p1 + warm]
    assert len(set(ids)) == 8


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_openai_bodies(endpoint: str) -> None:
    load = LoadSpec(endpoint=endpoint, input_len=20, output_len=9, requests_per_level=2)
    f = RequestFactory("http://127.0.0.1:1", 1, load, model="m1")
    req = f.measured(0)[0]
    b = body_of(req)
    assert req.endpoint == endpoint
    assert b["model"] == "m1" and b["max_tokens"] == 9 and b["ignore_eos"] is True
    assert b["temperature"] == 0.0 and b["stream"] is True
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    text = b["prompt"] if endpoint == "completions" else b["messages"][0]["content"]
    assert len(text.split()) == 20 == req.prompt_tokens
    if endpoint == "chat":
        assert b["messages"][0]["role"] == "user" and f.path == "/v1/chat/completions"
