"""sglang's HTTP API shapes, served by one speculative simulator process."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import requests

from specsweep.sim import SIM_SGLANG_VERSION
from tests.integration.sim.sim_proc import free_port, spawn, sse_chunks, stop, wait_ready

pytestmark = pytest.mark.integration

SPEC_FLAGS = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4", "--served-model-name", "llama-sim",
]  # fmt: skip


@contextlib.contextmanager
def sim_server(log: Path) -> Iterator[str]:
    """A speculative simulator, ready; its base URL. It must exit 0 on SIGTERM."""
    port = free_port()
    proc = spawn(port, *SPEC_FLAGS, log=log, SPECSWEEP_SIM_SEED="1")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, proc)
        yield base
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Shared by the tests that only read or add traffic; none of them resets its state."""
    with sim_server(tmp_path_factory.mktemp("sim") / "server.log") as base:
        yield base


def generate(url: str, n: int, stream: bool) -> requests.Response:
    body = {
        "text": "The capital city of France is",
        "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True},
        "stream": stream,
    }
    return requests.post(url + "/generate", json=body, stream=stream, timeout=30)


def test_generate_streaming_chunks(url):
    chunks = sse_chunks(generate(url, 64, stream=True))
    assert chunks[-1] == "[DONE]"
    data = [c for c in chunks[:-1] if isinstance(c, dict)]
    assert len(data) == len(chunks) - 1
    texts = [c["text"] for c in data]
    assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(texts))
    sizes = [len(c["output_ids"]) for c in data]
    assert sum(sizes) == 64 and max(sizes) > 1  # speculation: several tokens per chunk
    counts = [c["meta_info"]["completion_tokens"] for c in data]
    assert counts == [sum(sizes[: i + 1]) for i in range(len(sizes))]
    assert len(texts[-1].split()) == 64  # one filler word per token
    for c in data[:-1]:
        assert c["meta_info"]["finish_reason"] is None and "e2e_latency" not in c["meta_info"]
    final = data[-1]["meta_info"]
    assert final["finish_reason"] == {"type": "length", "length": 64}
    assert 5 <= final["prompt_tokens"] <= 8  # a rough count of the text
    assert final["cached_tokens"] == 0 and final["id"]
    assert final["e2e_latency"] > 0
    assert 1 <= final["spec_verify_ct"] < 64
    assert final["spec_accept_length"] == pytest.approx(64 / final["spec_verify_ct"])
    assert 0.0 <= final["spec_accept_rate"] <= 1.0
    # sglang 0.5.23's per-request histogram: verify steps by drafts accepted (cumulative,
    # on every chunk once a step verified: not the prefill's), consistent with the counts
    hist = final["spec_correct_drafts_histogram"]
    assert sum(hist) == final["spec_verify_ct"]
    assert sum(k * n for k, n in enumerate(hist)) == final["spec_num_correct_drafts"]
    assert "spec_correct_drafts_histogram" not in data[0]["meta_info"]
    assert all(c["meta_info"]["spec_correct_drafts_histogram"] for c in data[1:])


def test_generate_non_streaming(url):
    out = generate(url, 10, stream=False).json()
    assert len(out["output_ids"]) == 10 and len(out["text"].split()) == 10
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 10 and meta["finish_reason"]["type"] == "length"
    assert meta["spec_verify_ct"] >= 1 and "spec_accept_rate" in meta


def test_generate_with_input_ids_counts_prompt_tokens(url):
    body = {"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 3}}
    out = requests.post(url + "/generate", json=body, timeout=10).json()
    assert out["meta_info"]["prompt_tokens"] == 100


def completions(url: str, **extra) -> requests.Response:
    body = {"model": "llama-sim", "prompt": "Say something", "max_tokens": 12, **extra}
    return requests.post(url + "/v1/completions", json=body, stream=True, timeout=30)


def test_openai_completions_streaming_with_and_without_usage(url):
    chunks = sse_chunks(completions(url, stream=True, ignore_eos=True))
    assert chunks[-1] == "[DONE]"
    data = [c for c in chunks[:-1] if isinstance(c, dict)]
    assert all(c["usage"] is None for c in data)
    deltas = "".join(c["choices"][0]["text"] for c in data)
    assert len(deltas.split()) == 12  # deltas, not cumulative text
    assert data[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["object"] == "text_completion" and c["model"] == "llama-sim" for c in data)

    chunks = sse_chunks(
        completions(url, stream=True, stream_options={"include_usage": True}, ignore_eos=True)
    )
    usage_chunk = chunks[-2]
    assert isinstance(usage_chunk, dict) and usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 12
    assert usage_chunk["usage"]["total_tokens"] == 12 + usage_chunk["usage"]["prompt_tokens"]


def test_openai_continuous_usage_counts_tokens_in_every_chunk(url):
    opts = {"include_usage": True, "continuous_usage_stats": True}
    chunks = sse_chunks(completions(url, stream=True, stream_options=opts, ignore_eos=True))
    data = [c for c in chunks if isinstance(c, dict) and c["choices"]]
    counts = [c["usage"]["completion_tokens"] for c in data]
    assert counts == sorted(counts) and counts[-1] == 12
    words = [len(c["choices"][0]["text"].split()) for c in data]
    assert [b - a for a, b in zip([0, *counts], counts, strict=False)] == words


def test_openai_completions_non_streaming_and_chat(url):
    out = completions(url).json()
    assert out["usage"]["completion_tokens"] == 12
    assert len(out["choices"][0]["text"].split()) == 12
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    chat = requests.post(url + "/v1/chat/completions", json={**body, "stream": True}, timeout=10)
    data = [c for c in sse_chunks(chat) if isinstance(c, dict)]
    assert data[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len("".join(c["choices"][0]["delta"].get("content", "") for c in data).split()) == 5


def test_server_info_and_model_info(url):
    for path in ("/server_info", "/get_server_info"):
        info = requests.get(url + path, timeout=5).json()
        assert info["version"] == SIM_SGLANG_VERSION == "0.5.23-sim" and info["simulated"] is True
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_steps"] == 3 and info["speculative_eagle_topk"] == 1
        assert info["speculative_num_draft_tokens"] == 4
        assert info["max_running_requests"] == 48  # sglang's reset
        assert info["tp_size"] == 1 and info["port"] == int(url.rsplit(":", 1)[1])
        state = info["internal_states"][0]
        assert state["avg_spec_accept_length"] > 1.0  # includes the warmup, like sglang
        assert "last_gen_throughput" in state
    for path in ("/model_info", "/get_model_info"):
        model = requests.get(url + path, timeout=5).json()
        assert model["model_path"] == "sim/llama" and model["is_generation"] is True
    models = requests.get(url + "/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "llama-sim"
    assert requests.get(url + "/health_generate", timeout=5).status_code == 200
    assert requests.get(url + "/metrics", timeout=5).status_code == 404  # no --enable-metrics


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"sampling_params": {"max_new_tokens": 4}}),
        ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1}}),
        ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 10_000_000}}),
        ("/v1/completions", {"model": "m", "max_tokens": 4}),
    ],
)
def test_bad_requests_get_400_with_a_message(url, path, body):
    resp = requests.post(url + path, json=body, timeout=5)
    assert resp.status_code == 400
    if path.startswith("/v1/"):  # OpenAI's ErrorResponse, as sglang's serving classes
        err = resp.json()
        assert err["object"] == "error" and err["message"] and err["code"] == 400
        assert err["type"] == "BadRequestError" and err["param"] is None
    else:  # sglang's native {"error": {"message"}}
        assert resp.json()["error"]["message"]
    bad_json = requests.post(url + path, data=b"{not json", timeout=5)
    assert bad_json.status_code == 400  # FastAPI's validation error: ErrorResponse everywhere
    assert bad_json.json()["object"] == "error" and bad_json.json()["type"] == "Bad Request"


def test_many_concurrent_streams_beyond_the_running_cap(url):
    async def one(session: aiohttp.ClientSession) -> int:
        body = {"input_ids": [5] * 32, "sampling_params": {"max_new_tokens": 24}, "stream": True}
        last = None
        async with session.post(url + "/generate", json=body) as resp:
            async for line in resp.content:
                if line.startswith(b"data: {"):
                    last = json.loads(line[6:])
        assert last is not None
        return last["meta_info"]["completion_tokens"]

    async def main() -> list[int]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            return await asyncio.gather(*[one(session) for _ in range(96)])

    assert asyncio.run(main()) == [24] * 96  # 48 run, 48 queue, all complete


def test_flush_cache_resets_the_lifetime_accept_length(tmp_path):
    """On a server of its own: the flush would change what other tests read."""

    def accept_length(url: str) -> float:
        info = requests.get(url + "/server_info", timeout=5).json()
        return info["internal_states"][0]["avg_spec_accept_length"]

    with sim_server(tmp_path / "server.log") as url:
        assert generate(url, 16, stream=False).status_code == 200
        assert accept_length(url) > 1.0
        assert requests.post(url + "/flush_cache", timeout=5).status_code == 200
        assert accept_length(url) == 0.0
