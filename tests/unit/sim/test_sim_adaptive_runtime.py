"""Adaptive speculation at run time: the steps-0 cycle's cost, the per-cycle step count
the engine runs, its counters and log lines, and sglang's millisecond log stamps."""

from __future__ import annotations

import asyncio
import json
import logging
import random

import pytest

from specsweep.sim.adaptive import AdaptiveParams, decode_cuda_graph_batch_sizes
from specsweep.sim.adaptive_runtime import AdaptiveRuntime, runtime_from_args
from specsweep.sim.engine import Engine, SimRequest
from specsweep.sim.perf_model import (
    AcceptSampler,
    SpecConfig,
    accept_length_distribution,
    baseline_step_ms,
    expected_accept_length,
    spec_cycle_ms,
    with_overrides,
    zero_step_cycle_ms,
)
from specsweep.sim.profiles import bundled_names, get_profile
from specsweep.sim.sglang_logs import SglangFormatter, log_ms_enabled

P = get_profile("default")
ZERO = SpecConfig("EAGLE3", 0, 1, 1)


def test_zero_step_formula_on_the_default_profile():
    # target forward over B tokens + draft extend over B tokens (and its one layer of KV
    # at the calibration context, 256 tokens) + fixed bookkeeping + (v1 worker) CPU
    # scheduling: 9.64 + 1.157 B + 0.8 + 0.25 B + 0.00085 * 0.256 B + 0.3 + 0.9
    draft_kv = 0.00085 * 0.256 * 64
    expected = 9.64 + 1.157 * 64 + 0.8 + 16 + draft_kv + 0.3 + 0.9
    assert zero_step_cycle_ms(P, 64) == pytest.approx(expected, abs=2e-3)
    assert zero_step_cycle_ms(P, 64, overlap=True) == pytest.approx(100.788 + draft_kv, abs=2e-3)
    skipped = zero_step_cycle_ms(P, 64, skip_draft_extend=True)
    assert skipped == pytest.approx(baseline_step_ms(P, 64, overlap=False) + 0.3)
    assert zero_step_cycle_ms(P, 0) == 0.0
    per_seq = with_overrides(P, zero_step_per_seq_ms=0.1)
    assert zero_step_cycle_ms(per_seq, 64) == pytest.approx(zero_step_cycle_ms(P, 64) + 6.4)
    assert spec_cycle_ms(P, 64, ZERO) == zero_step_cycle_ms(P, 64)
    assert spec_cycle_ms(P, 64, ZERO, skip_zero_step_draft_extend=True) == skipped


@pytest.mark.parametrize("name", bundled_names())
@pytest.mark.parametrize("batch", [1, 2, 8, 16, 64, 256])
def test_zero_steps_costs_a_little_more_than_a_decode_and_less_than_one_step(name, batch):
    p = get_profile(name)
    for overlap in (False, True):
        zero = zero_step_cycle_ms(p, batch, overlap)
        assert zero > baseline_step_ms(p, batch, overlap)
        assert zero < spec_cycle_ms(p, batch, SpecConfig("EAGLE3", 1, 1, 2, overlap=overlap))
        skipped = zero_step_cycle_ms(p, batch, overlap, skip_draft_extend=True)
        assert baseline_step_ms(p, batch, overlap) < skipped < zero


@pytest.mark.parametrize("name", bundled_names())
def test_each_profile_states_its_zero_step_numbers(name):
    p = get_profile(name)
    for batch in (1, 64):
        assert f"{zero_step_cycle_ms(p, batch):.2f}" in p.assumptions
        assert f"{baseline_step_ms(p, batch):.2f}" in p.assumptions


def test_zero_step_accepts_exactly_one_token():
    assert accept_length_distribution(P, ZERO) == [1.0]
    assert expected_accept_length(P, ZERO) == 1.0
    sampler = AcceptSampler(P, ZERO, random.Random(0))
    assert {sampler.sample() for _ in range(200)} == {1}


def tiers(tmp_path, data) -> str:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(data))
    return str(path)


def runtime(path: str | None, initial: SpecConfig, lines: list[str]) -> AdaptiveRuntime:
    params = AdaptiveParams(initial.num_steps, path, log=lines.append)
    params.set_cuda_graph_bs(decode_cuda_graph_batch_sizes(256))
    return AdaptiveRuntime(P, initial, params, random.Random(0), log=lines.append)


def test_switches_are_logged_before_the_cycle_and_only_on_change(tmp_path):
    lines: list[str] = []
    path = tiers(tmp_path, {"1": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}})
    rt = runtime(path, SpecConfig("EAGLE3", 1, 1, 2), lines)
    assert rt.built_states() == [0]  # the initial state is registered, not built
    assert rt.activate(1) == 1 and lines == []
    assert rt.activate(9) == 0 and rt.cycle_ms(9) == zero_step_cycle_ms(P, 9)
    assert rt.activate(16) == 0 and rt.activate(2) == 1
    assert lines == [
        "Switch adaptive runtime state: steps 1 -> 0, draft_tokens 2 -> 1",
        "Switch adaptive runtime state: steps 0 -> 1, draft_tokens 1 -> 2",
    ]
    assert rt.cycle_ms(2) == spec_cycle_ms(P, 2, SpecConfig("EAGLE3", 1, 1, 2))
    assert rt.spec_for(3) is rt.spec_for(3)  # cached per step count


def test_a_slot_decision_switches_at_once(tmp_path):
    lines: list[str] = []
    path = tiers(tmp_path, {"1": {"candidate_steps": [1, 3], "warmup_batches": 0,
                                  "update_interval": 1, "ema_alpha": 1.0}})  # fmt: skip
    rt = runtime(path, SpecConfig("EAGLE3", 1, 1, 2), lines)
    rt.activate(1)
    rt.on_verify_complete([2], batch_size=1)  # EMA 2.0 > 1 - 0.5: up to 3
    assert rt.steps == 3 and lines == [
        "Adaptive spec params updated: steps 1 -> 3 (ema_accept_len=2.00)",
        "Switch adaptive runtime state: steps 1 -> 3, draft_tokens 2 -> 4",
    ]


def run_engine(engine_factory, batches: list[list[SimRequest]]) -> Engine:
    async def main() -> Engine:
        engine = engine_factory()
        engine.start()
        try:
            for batch in batches:
                for req in batch:
                    engine.submit(req)
                while not all(r.finished for r in batch):
                    await asyncio.sleep(0.001)
        finally:
            await engine.stop()
        return engine

    return asyncio.run(main())


def test_engine_runs_the_tier_of_its_batch(tmp_path):
    lines: list[str] = []
    path = tiers(tmp_path, {"1": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}})
    spec = SpecConfig("EAGLE3", 1, 1, 2)
    rt = runtime(path, spec, lines)
    alone = [SimRequest(prompt_tokens=8, max_new_tokens=200)]
    crowd = [SimRequest(prompt_tokens=8, max_new_tokens=50) for _ in range(16)]
    kwargs = {"max_running_requests": 48, "time_scale": 0.0001, "log": lines.append}
    engine = run_engine(lambda: Engine(P, spec, adaptive=rt, **kwargs), [alone, crowd])
    single = alone[0]
    kept = 199 - single.spec_verify_ct  # the last verify's run may be cut by max_new_tokens
    assert single.spec_verify_ct < 199 and kept <= single.spec_correct_drafts <= kept + 1
    for req in crowd:  # all 16 decoded together at steps 0: one token per verify
        assert req.completion_tokens == 50 and req.spec_verify_ct == 49
        assert req.spec_correct_drafts == 0 and req.spec_proposed_drafts == 49  # (2 - 1) each
    assert [line for line in lines if line.startswith("Switch")] == [
        "Switch adaptive runtime state: steps 1 -> 0, draft_tokens 2 -> 1"
    ]
    assert engine.spec_verify_ct == single.spec_verify_ct + 16 * 49  # every verify counts
    assert engine.spec_accepted_tokens == 199 + 16 * 49


def test_engine_feeds_the_slot_of_the_batch(tmp_path):
    lines: list[str] = []
    zeros = {"candidate_steps": [0]}
    rt = runtime(tiers(tmp_path, {"1": zeros, "8": zeros, "32": zeros}), ZERO, lines)
    reqs = [SimRequest(prompt_tokens=8, max_new_tokens=30) for _ in range(9)]
    run_engine(lambda: Engine(P, ZERO, max_running_requests=48, time_scale=0.0001, adaptive=rt),
               [reqs])  # fmt: skip
    # one token per cycle: the 9 run 29 verify cycles together, each fed to tier 8 (pads to 10)
    counts = {t: rt.params.slots[t].batch_count for t in rt.params.tiers}
    assert counts == {1: 0, 8: 29, 32: 0}
    assert all(r.spec_proposed_drafts == 0 and r.spec_verify_ct == 29 for r in reqs)
    assert rt.params.slots[8].ema_accept_len == -1.0 and lines == []  # frozen at steps 0


def test_runtime_from_args(tmp_path):
    args = {"speculative_adaptive": True, "speculative_num_steps": 3,
            "speculative_adaptive_config": None, "cuda_graph_max_bs": 256,
            "cuda_graph_bs": None, "disable_cuda_graph": True}  # fmt: skip
    spec = SpecConfig("EAGLE3", 3, 1, 4)
    rt = runtime_from_args(P, spec, args, 0, print, env={})
    assert rt is not None and rt.params.cuda_graph_bs is None and rt.built_states() == [0, 1, 5, 7]
    assert not rt.skip_zero_step_draft_extend
    env = {"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "true"}
    assert runtime_from_args(P, spec, args, 0, print, env=env).skip_zero_step_draft_extend
    assert runtime_from_args(P, spec, {**args, "speculative_adaptive": False}, 0, print) is None
    assert runtime_from_args(P, None, args, 0, print) is None


def _record(name: str, tp: str = "") -> logging.LogRecord:
    record = logging.LogRecord(name, logging.INFO, __file__, 1, "hello", None, None)
    record.created, record.msecs = 1700000000.0421, 42.1
    record.tp = tp
    return record


def test_log_milliseconds_like_sglang_log_ms():
    plain, ms = SglangFormatter(), SglangFormatter(log_ms=True)
    stamp = plain.formatTime(_record("x"), "%Y-%m-%d %H:%M:%S")
    assert plain.format(_record("sglang", " TP0")) == f"[{stamp} TP0] hello"
    assert ms.format(_record("sglang", " TP0")) == f"[{stamp}.042 TP0] hello"
    assert ms.format(_record("sglang")) == f"[{stamp}.042] hello"
    assert ms.format(_record("uvicorn.access")) == f"[{stamp}] hello"  # uvicorn: seconds
    assert log_ms_enabled({"SGLANG_LOG_MS": "1"}) and log_ms_enabled({"SGLANG_LOG_MS": "True"})
    assert not log_ms_enabled({}) and not log_ms_enabled({"SGLANG_LOG_MS": "0"})
