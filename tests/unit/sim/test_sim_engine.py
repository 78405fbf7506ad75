"""The asyncio scheduler: token accounting, batching cap, speculation counters."""

from __future__ import annotations

import asyncio
import time

import pytest

from specsweep.sim.engine import Engine, SimRequest, token_id_at, token_text
from specsweep.sim.perf_model import (
    SpecConfig,
    baseline_step_ms,
    expected_accept_length,
    prefill_step_ms,
)
from specsweep.sim.profiles import get_profile

P = get_profile("default")
SPEC = SpecConfig("EAGLE3", 3, 1, 4)


async def _drive(engine: Engine, reqs: list[SimRequest], watch=None) -> None:
    engine.start()
    for r in reqs:
        engine.submit(r)
    try:
        while not all(r.finished or r.aborted for r in reqs):
            if watch is not None:
                watch()
            await asyncio.sleep(0)
    finally:
        await engine.stop()


def run(engine_kwargs: dict, reqs: list[SimRequest], watch=None) -> Engine:
    async def main() -> Engine:
        engine = Engine(P, **engine_kwargs)
        await _drive(engine, reqs, watch and (lambda: watch(engine)))
        return engine

    return asyncio.run(main())


def test_baseline_generates_exactly_max_new_tokens():
    reqs = [SimRequest(prompt_tokens=16, max_new_tokens=n) for n in (1, 5, 17)]
    engine = run({"spec": None, "max_running_requests": 8, "time_scale": 0.001}, reqs)
    for r in reqs:
        assert r.finished and r.completion_tokens == r.max_new_tokens
        assert r.output_ids == [token_id_at(i) for i in range(r.max_new_tokens)]
        assert r.spec_verify_ct == 0 and r.finish_reason() == {
            "type": "length",
            "length": r.max_new_tokens,
        }
    assert engine.generation_tokens_total == 23 and engine.prompt_tokens_total == 48
    assert engine.avg_spec_accept_length == 0.0


def test_speculation_accepts_several_tokens_per_cycle():
    reqs = [SimRequest(prompt_tokens=8, max_new_tokens=400) for _ in range(4)]
    engine = run({"spec": SPEC, "max_running_requests": 8, "time_scale": 0.001, "seed": 3}, reqs)
    for r in reqs:
        assert r.completion_tokens == 400
        # the first token comes from prefill, the rest from verify cycles
        assert r.spec_verify_ct < 399
        # drafts accepted by the verifies, as sglang counts them: the last one's whole run,
        # although max_new_tokens kept only part of it (at most 3 of 4 tokens dropped)
        kept = 399 - r.spec_verify_ct
        assert kept <= r.spec_correct_drafts <= kept + 3
        assert r.spec_proposed_drafts == 3 * r.spec_verify_ct
        hist = r.spec_correct_drafts_histogram
        assert sum(hist) == r.spec_verify_ct and len(hist) <= 4
        assert sum(k * n for k, n in enumerate(hist)) == r.spec_correct_drafts
    mean = engine.avg_spec_accept_length
    assert mean == pytest.approx(expected_accept_length(P, SPEC), rel=0.1)


def test_max_running_requests_caps_the_batch():
    seen: list[int] = []
    reqs = [SimRequest(prompt_tokens=4, max_new_tokens=6) for _ in range(7)]
    run(
        {"spec": None, "max_running_requests": 2, "time_scale": 0.001},
        reqs,
        watch=lambda e: seen.append(len(e.running)),
    )
    assert max(seen) == 2
    assert all(r.completion_tokens == 6 for r in reqs)


def test_abort_removes_a_request():
    async def main() -> tuple[SimRequest, SimRequest]:
        engine = Engine(P, None, max_running_requests=4, time_scale=0.01)
        keep = SimRequest(prompt_tokens=4, max_new_tokens=400)
        drop = SimRequest(prompt_tokens=4, max_new_tokens=10_000)
        engine.start()
        engine.submit(keep)
        engine.submit(drop)
        await asyncio.sleep(0.01)
        engine.abort(drop)
        await asyncio.sleep(0.01)
        assert drop not in engine.running
        produced = drop.completion_tokens
        while not keep.finished:
            await asyncio.sleep(0.001)
        assert drop.completion_tokens == produced
        await engine.stop()
        return keep, drop

    keep, drop = asyncio.run(main())
    assert keep.completion_tokens == 400
    assert drop.aborted and drop.finish_reason() == {
        "type": "abort",
        "message": "Abort before finishing.",
    }
    assert drop.completion_tokens < 10_000


@pytest.mark.parametrize(
    ("interval", "seen"),
    [
        (1, list(range(1, 22))),
        (5, [1, 6, 11, 16, 21]),  # first token, then every 5 steps, then the end
        (7, [1, 8, 15, 21]),  # the end is sent whatever the interval
    ],
)
def test_stream_interval_notifies_every_n_steps(interval, seen):
    """A reader that takes each wakeup at once sees exactly the chunks the scheduler
    emitted (one event loop: its wakeup runs before the scheduler's next step)."""

    async def main() -> list[int]:
        engine = Engine(P, None, max_running_requests=4, time_scale=0.001)
        req = SimRequest(prompt_tokens=4, max_new_tokens=21, stream=True, stream_interval=interval)
        engine.start()
        engine.submit(req)
        lengths = []
        while not req.finished:
            await req.event.wait()
            req.event.clear()
            lengths.append(req.completion_tokens)
        await engine.stop()
        return lengths

    assert asyncio.run(main()) == seen


def test_simulated_time_is_respected():
    n = 40
    scale = 0.1
    expected = (prefill_step_ms(P, 4) + (n - 1) * baseline_step_ms(P, 1)) * scale / 1000
    req = SimRequest(prompt_tokens=4, max_new_tokens=n)
    started = time.monotonic()
    engine = run({"spec": None, "max_running_requests": 1, "time_scale": scale}, [req])
    elapsed = time.monotonic() - started
    # One prefill and n-1 decode steps were scheduled, so the simulated time is `expected`;
    # a loaded machine can only make the wall time longer, never shorter.
    assert engine._decode_steps == n - 1 and req.completion_tokens == n
    assert elapsed >= expected * 0.95


def test_filler_text_is_deterministic_words():
    assert token_text(token_id_at(0)) == token_text(token_id_at(0))
    assert token_text(token_id_at(3)).startswith(" ") and len(token_text(token_id_at(3))) > 1
