"""The simulator models workloads: acceptance depends on the text's category, and the KV
read makes the speculation pivot move up with context (docs/simulator.md, "Workloads")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from specsweep.sim.engine import Engine, SimRequest
from specsweep.sim.http_app import ServerState, build_app
from specsweep.sim.perf_model import (
    CATEGORIES,
    SpecConfig,
    baseline_step_ms,
    decode_context,
    expected_accept_length,
    model_accept_length,
    model_tok_s,
    pivot_concurrency,
    spec_cycle_ms,
    steady_state_throughput,
    target_forward_ms,
)
from specsweep.sim.profiles import ProfileError, get_profile, load_file
from specsweep.sim.server_args import parse_args, resolve_server_args, spec_config_from_args
from tests.unit.sim.test_sim_engine import _drive

DEFAULT = get_profile("default")
LLAMA = get_profile("llama-3.1-8b-eagle3-h200")
CHAIN3 = SpecConfig("EAGLE3", 3, 1, 4)
TREE = SpecConfig("EAGLE3", 5, 8, 32)
CONTEXTS = {n: decode_context(n, 256) for n in (512, 4096, 32768)}  # 256 output tokens
CAP = 128


def pivots(p, spec: SpecConfig) -> dict[int, int | None]:
    return {
        n: pivot_concurrency(p, spec, CAP, limit=CAP, context=ctx) for n, ctx in CONTEXTS.items()
    }


# --- the KV read -----------------------------------------------------------------------
def test_kv_constants_follow_from_kv_bytes_and_bandwidth():
    """The derivations written in the profiles: bytes per token / bandwidth."""

    def ms_per_ktok(bytes_per_token: float, tb_s: float) -> float:
        return bytes_per_token * 1000 / (tb_s * 1e12) * 1000

    assert LLAMA.kv_ms_per_ktok == pytest.approx(ms_per_ktok(32 * 8 * 128 * 2 * 2, 4.8), rel=0.01)
    assert LLAMA.draft_kv_ms_per_ktok == pytest.approx(ms_per_ktok(8 * 128 * 2 * 2, 4.8), rel=0.01)
    assert DEFAULT.kv_ms_per_ktok == pytest.approx(ms_per_ktok(64 * 8 * 128 * 2 * 2, 4.8), rel=0.01)
    kimi = get_profile("seeds-kimi-k2")  # MLA: (512 + 64) x 2 bytes x 61 layers, every rank
    assert kimi.kv_ms_per_ktok == pytest.approx(ms_per_ktok((512 + 64) * 2 * 61, 1.792), rel=0.01)


def test_a_forward_reads_each_sequences_kv_once_whatever_its_draft_tokens():
    long, short = 32_000, 1_000
    extra = LLAMA.kv_ms_per_ktok * 8 * (long - short) / 1000
    for tokens in (8, 8 * 4, 8 * 32):  # baseline step, chain verify, tree verify
        grown = target_forward_ms(LLAMA, 8, tokens, long) - target_forward_ms(
            LLAMA, 8, tokens, short
        )
        assert grown == pytest.approx(extra)
    # so a cycle grows by the target's KV read plus the draft's (one layer, steps + 1 times)
    draft = LLAMA.draft_kv_ms_per_ktok * 8 * (long - short) / 1000 * (CHAIN3.num_steps + 1)
    cycle = spec_cycle_ms(LLAMA, 8, CHAIN3, context=long) - spec_cycle_ms(
        LLAMA, 8, CHAIN3, context=short
    )
    assert cycle == pytest.approx(extra + draft)
    assert baseline_step_ms(LLAMA, 8, context=long) - baseline_step_ms(
        LLAMA, 8, context=short
    ) == pytest.approx(extra)


@pytest.mark.parametrize("name", ["default", "llama-3.1-8b-eagle3-h200", "seeds-kimi-k2"])
def test_the_default_context_is_the_calibration_context(name):
    p = get_profile(name)
    assert p.calibration_context == 256
    for point in p.calibration:
        assert point.context == 256 and point.category == "random"
    for c in (1, 16, 64):
        for spec in (None, CHAIN3):
            at_default = steady_state_throughput(p, c, spec)
            assert at_default == steady_state_throughput(p, c, spec, context=256)


@pytest.mark.parametrize(
    ("name", "specs"),
    [
        ("default", (SpecConfig("EAGLE3", 2, 1, 3), CHAIN3)),  # its tree never pays
        ("llama-3.1-8b-eagle3-h200", (CHAIN3, TREE)),
    ],
)
def test_the_pivot_moves_up_with_context(name, specs):
    """MagicDec's point: at long contexts a verify reads each request's KV once for all its
    draft tokens, so speculation keeps paying at larger batches (docs/simulator.md)."""
    p = get_profile(name)
    for spec in specs:
        piv = pivots(p, spec)
        short, mid, long = piv[512], piv[4096], piv[32768]
        assert short is not None and 2 <= short <= 64, piv
        assert mid is None or mid >= short, piv
        assert long is None or long >= 2 * short, piv
    # the numbers documented for the chain (speculation wins at every level up to 128 at 32k)
    assert pivots(p, CHAIN3)[32768] is None
    ctx = CONTEXTS[32768]
    gain = steady_state_throughput(p, CAP, CHAIN3, CAP, context=ctx) / steady_state_throughput(
        p, CAP, context=ctx
    )
    assert 1.0 < gain < 2.5  # MagicDec: up to ~2x at batch 32-256 past ~1k tokens


def test_documented_pivots():
    assert pivots(DEFAULT, CHAIN3) == {512: 6, 4096: 6, 32768: None}
    assert pivots(LLAMA, CHAIN3) == {512: 37, 4096: None, 32768: None}
    assert pivots(LLAMA, TREE) == {512: 20, 4096: 37, 32768: None}


# --- acceptance by category -------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", "llama-3.1-8b-eagle3-h200", "seeds-kimi-k2"])
@pytest.mark.parametrize(
    "spec", [SpecConfig("EAGLE3", 2, 1, 3), CHAIN3, SpecConfig("EAGLE3", 7, 1, 8), TREE]
)
def test_accept_length_per_category_is_ordered_and_random_lowest(name, spec):
    p = get_profile(name)
    el = {c: expected_accept_length(p, spec, c) for c in CATEGORIES}
    assert el["code"] > el["reasoning"] > el["chat"] > el["summarisation"] > el["random"]
    assert el["text"] == el["chat"]
    assert el["summarisation"] > el["random"] * 1.02  # clearly less on random ids


def test_published_ratios_on_the_drafter_they_were_measured_on():
    """Llama-3.1-8B's EAGLE-3 drafter, 7-step chain (docs/simulator.md's table)."""
    spec = SpecConfig("EAGLE3", 7, 1, 8)
    el = {c: expected_accept_length(LLAMA, spec, c) for c in CATEGORIES}
    chat = el["chat"]
    assert el["code"] / chat == pytest.approx(1.26, abs=0.02)
    assert el["reasoning"] / chat == pytest.approx(1.21, abs=0.02)
    assert el["summarisation"] / chat == pytest.approx(0.90, abs=0.02)
    assert el["random"] / chat == pytest.approx(0.75, abs=0.02)


def test_unknown_categories_are_refused():
    with pytest.raises(ValueError, match="unknown text category"):
        expected_accept_length(DEFAULT, CHAIN3, "poetry")


def test_profiles_may_override_scales_and_state_their_context(tmp_path: Path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "extends: default\ncalibration_context: 1000\n"
        "acceptance: {rejection_scale: {code: 0.2, text: 0.9}}\n"
        "target: {kv_ms_per_ktok: 0.1}\nlimits: {context_length: 32768}\n"
        "calibration:\n  - {label: c1, tok_s: 90, context: 1000, category: chat}\n"
    )
    p = load_file(path)
    table = dict(p.rejection_scale)
    assert table["code"] == 0.2 and table["chat"] == dict(DEFAULT.rejection_scale)["chat"]
    assert p.calibration_context == 1000 and p.kv_ms_per_ktok == 0.1
    assert p.context_length == 32768
    assert expected_accept_length(p, CHAIN3, "text") < expected_accept_length(p, CHAIN3, "chat")
    point = p.calibration[0]
    assert (point.context, point.category) == (1000, "chat")
    assert model_tok_s(p, point) == steady_state_throughput(p, 1, context=1000)
    assert model_accept_length(p, point) == 1.0
    for bad, needle in (
        ("acceptance: {rejection_scale: {poetry: 0.5}}\n", "unknown category"),
        ("acceptance: {rejection_scale: [0.5]}\n", "must be a mapping"),
        ("calibration: [{label: x, tok_s: 1, category: poetry}]\n", "category must be one of"),
        ("calibration_context: -5\n", "must be >= 0"),
    ):
        path.write_text(bad)
        with pytest.raises(ProfileError, match=needle):
            load_file(path)


# --- the engine -------------------------------------------------------------------------
def drive(engine: Engine, reqs: list[SimRequest], watch=None) -> None:
    asyncio.run(_drive(engine, reqs, watch))


def test_the_engine_times_each_step_at_the_batchs_real_context():
    engine = Engine(LLAMA, None, max_running_requests=8, time_scale=0.0001)
    reqs = [SimRequest(prompt_tokens=n, max_new_tokens=m) for n, m in ((100, 30), (30_000, 60))]
    seen: list[float] = []

    def check() -> None:
        assert engine._kv_tokens == sum(r.context for r in engine.running)
        if engine.running:
            seen.append(engine.mean_context)

    drive(engine, reqs, check)
    assert max(seen) > 10_000  # the 30k prompt's KV is counted
    # the last step decoded the one request left, at its own context
    assert engine.last_step_ms == pytest.approx(baseline_step_ms(LLAMA, 1, True, 30_000 + 59))


def test_the_kv_pool_bounds_the_batch_at_long_contexts():
    # 8 streams of 30k prompts + 100 outputs on a 100k-token pool: 3 fit, the rest queue
    engine = Engine(LLAMA, None, max_running_requests=8, time_scale=0.0001,
                    max_total_num_tokens=100_000)  # fmt: skip
    reqs = [SimRequest(prompt_tokens=30_000, max_new_tokens=100) for _ in range(8)]
    seen: list[int] = []
    drive(engine, reqs, lambda: seen.append(len(engine.running)))
    assert max(seen) == 3 and engine.token_usage() <= 1.0
    assert all(r.finished for r in reqs)
    alone = Engine(LLAMA, None, max_running_requests=8, time_scale=0.0001,
                   max_total_num_tokens=1_000)  # fmt: skip
    big = [SimRequest(prompt_tokens=5_000, max_new_tokens=10)]
    drive(alone, big)  # larger than the pool with nothing beside it: runs alone
    assert big[0].finished


def test_the_engine_samples_each_requests_category():
    engine = Engine(LLAMA, TREE, max_running_requests=8, time_scale=0.0001, seed=2)
    code = [SimRequest(prompt_tokens=64, max_new_tokens=600, category="code") for _ in range(3)]
    rand = [SimRequest(prompt_tokens=64, max_new_tokens=600) for _ in range(3)]
    drive(engine, code + rand)

    def accept(reqs: list[SimRequest]) -> float:
        return sum(r.completion_tokens - 1 for r in reqs) / sum(r.spec_verify_ct for r in reqs)

    assert accept(code) == pytest.approx(expected_accept_length(LLAMA, TREE, "code"), rel=0.08)
    assert accept(rand) == pytest.approx(expected_accept_length(LLAMA, TREE, "random"), rel=0.08)
    assert accept(code) > accept(rand) * 1.15
    assert set(engine._samplers) == {"code", "random"}


# --- over HTTP ----------------------------------------------------------------------------
SPEC_ARGS = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft",
    "--speculative-num-steps", "5", "--speculative-eagle-topk", "8",
    "--speculative-num-draft-tokens", "32", "--served-model-name", "llama-sim",
]  # fmt: skip


def serve(argv: list[str], profile, calls, categories: list[str] | None = None) -> Any:
    """Run ``calls(client)`` against the app in this process (engine at time scale 1e-4);
    the category of every request the engine admits is appended to ``categories``."""

    async def main() -> Any:
        args, _ = resolve_server_args(parse_args(["--model-path", "sim/llama", *argv]))
        spec = spec_config_from_args(args)
        engine = Engine(profile, spec, args["max_running_requests"], time_scale=1e-4, seed=1)
        if categories is not None:
            submit = engine.submit

            def spy(req: SimRequest) -> None:
                categories.append(req.category)
                submit(req)

            engine.submit = spy  # type: ignore[method-assign]
        state = ServerState(args, engine, "0.5.23-sim", health_seconds=0.0)
        state.status = "up"
        engine.start()
        client = TestClient(TestServer(build_app(state)))
        await client.start_server()
        try:
            return await calls(client)
        finally:
            await client.close()
            await engine.stop()

    return asyncio.run(main())


def code_prompt() -> str:
    from specsweep.workloads import load_builtin

    return next(r.text for r in load_builtin().records if r.category == "code")


def test_a_code_chat_accepts_more_than_random_ids_over_http():
    prompt = code_prompt()

    async def calls(client: TestClient) -> tuple[float, float]:
        chat_body = {
            "model": "llama-sim",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": prompt},
            ],
            "max_tokens": 1000,
        }
        chat = await (await client.post("/v1/chat/completions", json=chat_body)).json()
        assert chat["usage"]["completion_tokens"] == 1000
        # no meta_info on the OpenAI route: the server's lifetime average is this request's
        info = await (await client.get("/server_info")).json()
        chat_len = info["internal_states"][0]["avg_spec_accept_length"]
        assert (await client.post("/flush_cache")).status == 200
        ids_body = {"input_ids": list(range(100, 400)), "sampling_params": {"max_new_tokens": 1000}}
        ids = await (await client.post("/generate", json=ids_body)).json()
        return chat_len, ids["meta_info"]["spec_accept_length"]

    categories: list[str] = []
    chat_len, ids_len = serve(SPEC_ARGS, LLAMA, calls, categories)
    assert categories == ["code", "random"]
    assert chat_len == pytest.approx(expected_accept_length(LLAMA, TREE, "code"), rel=0.08)
    assert ids_len == pytest.approx(expected_accept_length(LLAMA, TREE, "random"), rel=0.08)
    assert chat_len > ids_len * 1.15


def test_every_route_classifies_its_prompt():
    prompt = code_prompt()
    bodies = [
        ("/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 4}}),
        ("/generate", {"input_ids": [5] * 50, "sampling_params": {"max_new_tokens": 4}}),
        ("/v1/completions", {"model": "llama-sim", "prompt": prompt, "max_tokens": 4}),
        ("/v1/completions", {"model": "llama-sim", "prompt": [1, 2, 3], "max_tokens": 4}),
        (
            "/v1/chat/completions",
            {"model": "llama-sim", "max_tokens": 4, "messages": [
                {"role": "user", "content": [{"type": "text", "text": prompt}]},
                {"role": "assistant", "content": "Sure."},
            ]},
        ),
        (
            "/v1/chat/completions",
            {"model": "llama-sim", "max_tokens": 4, "messages": [
                {"role": "user", "content": "How do I bake bread at home, step by step?"},
            ]},
        ),
    ]  # fmt: skip

    async def calls(client: TestClient) -> list[int]:
        return [(await client.post(path, json=body)).status for path, body in bodies]

    categories: list[str] = []
    assert serve(SPEC_ARGS, LLAMA, calls, categories) == [200] * len(bodies)
    assert categories == ["code", "random", "code", "random", "code", "text"]


def test_v1_models_reports_the_context_length_like_sglang():
    async def calls(client: TestClient) -> list[Any]:
        models = await (await client.get("/v1/models")).json()
        one = await client.get("/v1/models/llama-sim")
        missing = await client.get("/v1/models/other")
        return [models, await one.json(), missing.status, await missing.json()]

    models, one, status, missing = serve(SPEC_ARGS, LLAMA, calls)
    card = models["data"][0]
    assert card["max_model_len"] == 131072 == LLAMA.context_length
    assert card["parent"] is None and card["root"] == card["id"] == "llama-sim"
    assert one["max_model_len"] == 131072
    assert status == 404 and missing["error"]["code"] == "model_not_found"
    models, *_ = serve(SPEC_ARGS, get_profile("seeds-kimi-k2"), calls)
    assert models["data"][0]["max_model_len"] == 262144  # the profile's model

    async def too_long(client: TestClient) -> list[Any]:
        card = (await (await client.get("/v1/models")).json())["data"][0]
        body = {"input_ids": [1] * 4000, "sampling_params": {"max_new_tokens": 100}}
        resp = await client.post("/generate", json=body)
        return [card, resp.status, await resp.json()]

    card, status, error = serve([*SPEC_ARGS, "--context-length", "4096"], LLAMA, too_long)
    assert card["max_model_len"] == 4096
    assert status == 400 and "maximum context length of 4096" in error["error"]["message"]


def test_adaptive_speculation_samples_each_requests_category():
    """The adaptive runtime keeps a sampler per step count and category, and times each
    cycle at the batch's context."""
    import random

    from specsweep.sim.adaptive import AdaptiveParams
    from specsweep.sim.adaptive_runtime import AdaptiveRuntime

    initial = SpecConfig("EAGLE3", 3, 1, 4)
    rt = AdaptiveRuntime(LLAMA, initial, AdaptiveParams(3, None), random.Random(0))
    n = 20_000
    code = sum(rt.sample("code") for _ in range(n)) / n
    rand = sum(rt.sample() for _ in range(n)) / n
    assert code == pytest.approx(expected_accept_length(LLAMA, initial, "code"), rel=0.02)
    assert rand == pytest.approx(expected_accept_length(LLAMA, initial, "random"), rel=0.02)
    assert set(rt._samplers) == {(3, "code"), (3, "random")}
    assert rt.cycle_ms(8, 32_000) == pytest.approx(spec_cycle_ms(LLAMA, 8, initial, context=32_000))
    assert rt.cycle_ms(8) == pytest.approx(spec_cycle_ms(LLAMA, 8, initial))
