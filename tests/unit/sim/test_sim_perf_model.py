"""Properties of the simulator's performance model that the demo and analysis rely on."""

from __future__ import annotations

import itertools
import random

import pytest

from specsweep.sim.perf_model import (
    AcceptSampler,
    SpecConfig,
    accept_probs,
    baseline_step_ms,
    draft_ms,
    expected_accept_length,
    pivot_concurrency,
    prefill_step_ms,
    spec_cycle_ms,
    steady_state_throughput,
    target_forward_ms,
    with_overrides,
)
from specsweep.sim.profiles import get_profile

P = get_profile("default")


def eagle3(steps: int, topk: int = 1, ndt: int | None = None) -> SpecConfig:
    return SpecConfig("EAGLE3", steps, topk, ndt if ndt is not None else steps + 1)


def ratio(c: int, spec: SpecConfig, mrr: int | None = None, p=P) -> float:
    return steady_state_throughput(p, c, spec, mrr) / steady_state_throughput(p, c)


def test_baseline_is_calibrated_to_the_seeds():
    assert 88 <= steady_state_throughput(P, 1) <= 97  # ~92.6 tok/s single stream
    assert 720 <= steady_state_throughput(P, 64) <= 820  # ~770 tok/s at saturation
    assert baseline_step_ms(P, 1) == pytest.approx(10.8, abs=0.2)


def test_baseline_step_grows_with_batch_and_throughput_saturates():
    steps = [baseline_step_ms(P, b) for b in (1, 2, 8, 32, 128)]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    tputs = [steady_state_throughput(P, c) for c in (1, 4, 16, 64, 128, 256)]
    assert tputs == sorted(tputs)
    assert tputs[-1] / tputs[-3] < 1.15  # flat past ~64


@pytest.mark.parametrize("steps", [2, 3])
def test_speculation_wins_at_low_concurrency(steps):
    assert 1.3 <= ratio(1, eagle3(steps)) <= 1.6


@pytest.mark.parametrize("steps", [1, 2, 3])
@pytest.mark.parametrize("c", [64, 128])
def test_speculation_loses_at_high_concurrency(steps, c):
    assert ratio(c, eagle3(steps), mrr=48) < 0.7  # sglang's default reset to 48
    assert ratio(c, eagle3(steps), mrr=c) < 0.7  # and even with the same cap


@pytest.mark.parametrize("steps", [2, 3])
def test_pivot_lies_between_4_and_32(steps):
    pivot = pivot_concurrency(P, eagle3(steps), max_running_requests=48)
    assert pivot is not None and 4 <= pivot <= 32


def test_more_steps_cost_more_per_cycle():
    for batch in (1, 16, 64):
        cycles = [spec_cycle_ms(P, batch, eagle3(s)) for s in range(1, 8)]
        assert cycles == sorted(cycles) and len(set(cycles)) == len(cycles)
        drafts = [draft_ms(P, batch, eagle3(s)) for s in range(1, 8)]
        assert drafts == sorted(drafts)
    assert draft_ms(P, 8, eagle3(3, topk=4, ndt=8)) > draft_ms(P, 8, eagle3(3))


def test_accept_probabilities_decay_with_depth():
    probs = accept_probs(P, eagle3(6))
    assert len(probs) == 6
    assert all(a > b for a, b in itertools.pairwise(probs))
    assert all(0 < a < 1 for a in probs)


def test_expected_accept_length_is_increasing_and_concave_in_steps():
    lengths = [expected_accept_length(P, eagle3(s)) for s in range(1, 9)]
    gains = [b - a for a, b in itertools.pairwise(lengths)]
    assert all(g > 0 for g in gains)
    assert all(a > b for a, b in itertools.pairwise(gains))
    for s, length in zip(range(1, 9), lengths, strict=True):
        assert 1 < length <= s + 1


def test_too_many_steps_lose_even_at_concurrency_one():
    best = max(range(1, 11), key=lambda s: steady_state_throughput(P, 1, eagle3(s)))
    assert 2 <= best <= 4
    assert steady_state_throughput(P, 1, eagle3(10)) < steady_state_throughput(P, 1, eagle3(3))


def test_wider_tree_accepts_more_but_draft_tokens_cap_it():
    chain = expected_accept_length(P, eagle3(3))
    tree = expected_accept_length(P, eagle3(3, topk=4, ndt=10))
    assert tree > chain
    narrow = expected_accept_length(P, eagle3(3, topk=4, ndt=4))  # no room for width
    assert narrow == pytest.approx(chain)
    capped = expected_accept_length(P, eagle3(5, topk=4, ndt=3))
    assert capped <= 3


def test_sampler_mean_matches_expectation_and_varies():
    spec = eagle3(3)
    sampler = AcceptSampler(P, spec, random.Random(7))
    samples = [sampler.sample() for _ in range(40_000)]
    assert min(samples) == 1 and max(samples) == spec.num_draft_tokens
    mean = sum(samples) / len(samples)
    assert mean == pytest.approx(expected_accept_length(P, spec), rel=0.02)
    again = AcceptSampler(P, spec, random.Random(7))
    assert [again.sample() for _ in range(100)] == samples[:100]  # seeded


def test_max_running_requests_caps_the_batch():
    spec = eagle3(2)
    at_cap = steady_state_throughput(P, 48, spec, max_running_requests=48)
    assert steady_state_throughput(P, 200, spec, max_running_requests=48) == at_cap
    assert steady_state_throughput(P, 200, None, max_running_requests=16) == (
        steady_state_throughput(P, 16)
    )
    assert steady_state_throughput(P, 0) == 0.0


def test_overlap_scheduler_hides_cpu_overhead():
    assert baseline_step_ms(P, 8, overlap=False) > baseline_step_ms(P, 8, overlap=True)
    v1 = SpecConfig("EAGLE3", 2, 1, 3, overlap=False)
    v2 = SpecConfig("EAGLE3", 2, 1, 3, overlap=True)
    assert spec_cycle_ms(P, 4, v2) < spec_cycle_ms(P, 4, v1)


def test_prefill_cost_grows_with_prompt_tokens():
    assert prefill_step_ms(P, 4096) > prefill_step_ms(P, 128) > 0
    assert prefill_step_ms(P, 128, eagle3(2)) > prefill_step_ms(P, 128)


def test_other_algorithms():
    eagle = SpecConfig("EAGLE", 3, 1, 4)
    assert expected_accept_length(P, eagle) < expected_accept_length(P, eagle3(3))
    standalone = SpecConfig("STANDALONE", 3, 1, 4)
    assert draft_ms(P, 4, standalone) > draft_ms(P, 4, eagle3(3))
    ngram = SpecConfig("NGRAM", 11, 1, 12)
    assert draft_ms(P, 64, ngram) < draft_ms(P, 64, eagle3(3))
    assert 1 < expected_accept_length(P, ngram) < 12


def test_validation():
    # steps 0 is only sglang's trivial verify (adaptive EAGLE): topk 1 and one draft token
    assert SpecConfig("EAGLE3", 0, 1, 1).is_zero_step
    for bad in [("EAGLE3", 0, 1, 2), ("EAGLE3", 0, 2, 1), ("NGRAM", 0, 1, 1),
                ("STANDALONE", 0, 1, 1), ("EAGLE3", 1, 1, 1)]:  # fmt: skip
        with pytest.raises(ValueError):
            SpecConfig(*bad)
    with pytest.raises(ValueError):
        SpecConfig("MEDUSA", 2, 1, 3)
    faster = with_overrides(P, t0_ms=5.0)
    assert steady_state_throughput(faster, 1) > steady_state_throughput(P, 1)


def test_roofline_knee_makes_big_verifies_expensive():
    flat = with_overrides(P, knee_tokens=0, a_knee_ms=0.0)
    kneed = with_overrides(P, knee_tokens=64, a_knee_ms=0.5)
    assert target_forward_ms(kneed, 1, 16) == target_forward_ms(flat, 1, 16)  # below the knee
    extra = target_forward_ms(kneed, 48, 768) - target_forward_ms(flat, 48, 768)
    assert extra == pytest.approx(0.5 * (768 - 64))


def test_explicit_acceptance_per_depth():
    p = with_overrides(P, accept_by_depth=(0.8, 0.5), accept_decay=0.5)
    probs = accept_probs(p, eagle3(3))
    assert probs == pytest.approx([0.8, 0.5, 0.25])  # past the table: last x decay
