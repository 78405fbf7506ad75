"""The load generator with real prompts: the bundled set, JSONL, ShareGPT and replay files,
on every endpoint, with categories and per-request output lengths."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from specsweep.config import LoadSpec
from specsweep.loadgen.client import PreparedRequest
from specsweep.loadgen.payloads import RequestFactory
from specsweep.loadgen.runner import run_level
from specsweep.workloads import RANDOM_WORDS, category_of, estimate_tokens, load_builtin
from tests.unit.loadgen.stub_util import fast_stub

URL = "http://127.0.0.1:1"


def body_of(req: PreparedRequest) -> dict[str, Any]:
    _, _, body = req.wire.partition(b"\r\n\r\n")
    return json.loads(body)


def prompt_of(req: PreparedRequest) -> str | list[int]:
    b = body_of(req)
    if req.endpoint == "chat":
        assert [m["role"] for m in b["messages"]] == ["user"]
        return b["messages"][0]["content"]
    if req.endpoint == "completions":
        return b["prompt"]
    return b["input_ids"] if "input_ids" in b else b["text"]


def asked_of(req: PreparedRequest) -> int:
    b = body_of(req)
    return b["sampling_params"]["max_new_tokens"] if req.endpoint == "generate" else b["max_tokens"]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("endpoint", ["auto", "chat", "completions", "generate"])
def test_builtin_prompts_are_fitted_and_carry_their_category(endpoint: str) -> None:
    load = LoadSpec(prompts="builtin", endpoint=endpoint, input_len=512, output_len=64,
                    requests_per_level=6, seed=3)  # fmt: skip
    f = RequestFactory(URL, 2, load, model="m")
    expected = {"auto": "chat"}.get(endpoint, endpoint)
    assert f.endpoint == expected
    warm = f.warmup()
    requests = f.measured(0) + f.measured(1) + warm
    for r in requests:
        text = prompt_of(r)
        assert isinstance(text, str) and abs(estimate_tokens(text) - 512) <= 5
        assert r.prompt_tokens == estimate_tokens(text) and r.category == category_of(text)
    texts = [str(prompt_of(r)) for r in requests]
    assert {r.category for r in requests} <= set(load_builtin().categories)
    assert all(asked_of(r) == 64 == r.output_len for r in requests[: len(requests) - 2])
    assert [(asked_of(r), r.output_len) for r in warm] == [(32, 32), (64, 64)]  # staggered
    assert len({t[:100] for t in texts}) == len(texts)  # no two share a start
    body = body_of(requests[0])
    assert body.get("temperature", body.get("sampling_params", {}).get("temperature")) == 0.0


def test_builtin_passes_are_reproducible_and_take_different_prompts() -> None:
    load = LoadSpec(prompts="builtin", prompt_length="natural", requests_per_level=20)
    a, b = RequestFactory(URL, 4, load), RequestFactory(URL, 4, load)
    assert [r.wire for r in a.measured(0)] == [r.wire for r in b.measured(0)]
    texts = [prompt_of(r) for r in a.measured(0) + a.measured(1) + a.warmup()]
    assert len(set(map(str, texts))) == 44  # 20 + 20 + 4 of 240: none twice
    bundled = {r.text for r in load_builtin().records}
    assert all(t in bundled for t in texts)  # natural: as they are


def test_every_builtin_pass_sends_the_categories_in_proportion() -> None:
    """The bundled set has 60 prompts of each of 4 categories: every pass of 32 sends 8
    of each, on every level (drift.yield_variance counts only the noise within them)."""
    load = LoadSpec(prompts="builtin", prompt_length="natural", requests_per_level=32)
    for c in (1, 4, 8):
        f = RequestFactory(URL, c, load)
        for repeat in range(8):
            cats = [r.category for r in f.measured(repeat)]
            assert {cats.count(k) for k in load_builtin().categories} == {8}, (c, repeat)


def test_jsonl_natural_uses_each_records_output_len(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", [
        {"prompt": "Say hello to the new team members in a friendly way.", "output_len": 7},
        {"text": "Explain what a mutex is, briefly.", "category": "code"},
        {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": "What is the capital of Peru?"}],
         "category": "chat", "output_len": 3},
    ])  # fmt: skip
    load = LoadSpec(dataset=path, prompt_length="natural", output_len=11, requests_per_level=3)
    f = RequestFactory(URL, 1, load, model="m")
    got = {prompt_of(r): (asked_of(r), r.category, r.output_len) for r in f.measured(0)}
    assert got == {
        "Say hello to the new team members in a friendly way.": (7, None, 7),
        "Explain what a mutex is, briefly.": (11, "code", 11),
        "What is the capital of Peru?": (3, "chat", 3),
    }


def test_jsonl_fit_uses_the_shapes_lengths_and_fills_from_the_file(tmp_path: Path) -> None:
    rows = [{"prompt": f"Question number {i}: why is the number {i} interesting?",
             "category": "q", "output_len": 5} for i in range(30)]  # fmt: skip
    path = write_jsonl(tmp_path / "qs.jsonl", rows)
    load = LoadSpec(dataset=path, endpoint="completions", input_len=300, output_len=9,
                    requests_per_level=8)  # fmt: skip
    for r in RequestFactory(URL, 2, load, model="m").measured(0):
        text = prompt_of(r)
        assert isinstance(text, str) and abs(estimate_tokens(text) - 300) <= 3
        assert text.rstrip().endswith("interesting?") and "\n\nQuestion number" in text
        assert asked_of(r) == 9 and r.category == "q"


def test_sharegpt_on_generate_sends_text(tmp_path: Path) -> None:
    data = [{"conversations": [{"from": "human", "value": f"tell me about topic {i}"},
                               {"from": "gpt", "value": "ok"}]} for i in range(10)]  # fmt: skip
    path = tmp_path / "share.json"
    path.write_text(json.dumps(data))
    load = LoadSpec(dataset=path, endpoint="generate", prompt_length="natural",
                    requests_per_level=4, output_len=3)  # fmt: skip
    f = RequestFactory(URL, 2, load)
    texts = [body_of(r)["text"] for r in f.measured(0) + f.measured(1) + f.warmup()]
    assert len(set(texts)) == 10  # 4 + 4 + 2 from one shuffle of 10: no prompt twice
    assert all(t.startswith("tell me about topic ") for t in texts)
    assert {r.category for r in f.measured(0)} == {None}


def test_few_prompts_warn_about_the_prefix_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_jsonl(tmp_path / "two.jsonl", [{"prompt": "first one here"}, {"prompt": "two"}])
    with caplog.at_level(logging.WARNING, logger="specsweep.loadgen.payloads"):
        RequestFactory(URL, 2, LoadSpec(dataset=path, requests_per_level=4))
    assert "jsonl:two.jsonl has 2 prompts for 4 requests" in caplog.text


def replay_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "traffic.jsonl", [
        {"input_len": 12, "output_len": 3, "category": "short"},
        {"input_len": 40, "output_len": 9},
        {"input_len": 20, "output_len": 5, "prompt": "Recorded prompt text goes here.",
         "category": "chat"},
    ])  # fmt: skip


@pytest.mark.parametrize("endpoint", ["generate", "completions", "chat"])
def test_replay_sends_each_record_at_its_own_lengths_in_order(
    tmp_path: Path, endpoint: str
) -> None:
    load = LoadSpec(dataset=replay_file(tmp_path), endpoint=endpoint, requests_per_level=4)
    f = RequestFactory(URL, 2, load, model="m")
    first = f.measured(0)
    assert [asked_of(r) for r in first] == [3, 9, 5, 3]  # file order, cycling
    assert [r.output_len for r in first] == [3, 9, 5, 3]
    assert [r.category for r in first] == ["short", "random", "chat", "short"]
    assert [r.prompt_tokens for r in first] == [12, 40, 20, 12]
    prompts = [prompt_of(r) for r in first]
    assert prompts[2] == "Recorded prompt text goes here."
    if endpoint == "generate":
        assert [len(p) for p in (prompts[0], prompts[1])] == [12, 40]
    else:
        assert isinstance(prompts[0], str) and len(prompts[0].split()) == 12
        assert all(w in RANDOM_WORDS for w in prompts[1].split())  # type: ignore[union-attr]
    assert prompts[0] != prompts[3]  # the same record, fresh random prompt
    assert [asked_of(r) for r in f.measured(1)] == [9, 5, 3, 9]  # the next slice
    # the far end (9, 5), the warm-in staggered: 1/2 and 2/2 of each one's own length
    assert [asked_of(r) for r in f.warmup()] == [5, 5]
    assert [r.output_len for r in f.warmup()] == [5, 5]


def test_replay_levels_check_each_requests_own_output_length(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    load = LoadSpec(dataset=replay_file(tmp_path), endpoint="generate", requests_per_level=6)

    async def body(**stub: Any) -> Any:
        async with fast_stub(**stub) as url:
            return await run_level(url, 2, load)

    with caplog.at_level(logging.WARNING, logger="specsweep.loadgen.runner"):
        result = asyncio.run(body())
    assert [r.output_tokens for r in result.records] == [3, 9, 5, 3, 9, 5]
    assert [r.category for r in result.records] == ["short", "random", "chat"] * 2
    assert "fewer tokens" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="specsweep.loadgen.runner"):
        result = asyncio.run(body(output_len=5))  # the stub stops every request at 5
    assert [r.output_tokens for r in result.records] == [3, 5, 5, 3, 5, 5]
    assert "2 requests returned fewer tokens than they asked for" in caplog.text


def test_builtin_level_on_the_stub_records_categories() -> None:
    load = LoadSpec(prompts="builtin", input_len=256, output_len=4, requests_per_level=8)

    async def body() -> Any:
        async with fast_stub() as url:
            return await run_level(url, 2, load)

    result = asyncio.run(body())
    assert result.metrics.completed == 8
    assert all(r.category in load_builtin().categories for r in result.records)
