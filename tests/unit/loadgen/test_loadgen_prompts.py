"""Prompts are exact-length, avoid special ids, and are reproducible per level."""

from __future__ import annotations

import pytest

from specsweep.loadgen.prompts import MIN_TOKEN_ID, level_seed, make_input_ids


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
