"""A stream that does not add up is not read as acceptance (issue 29, item 3).

A server that ignores `continuous_usage_stats` streams several tokens per chunk with no
count: counted one per chunk, "no draft is ever accepted", and the model fitted an
acceptance of 0.001 and predicted every variant at the baseline's throughput. The model
uses chunks only where they add up, falls back to accept lengths (the /generate
endpoint's meta_info), and otherwise says it cannot predict; the search says it is blind.
"""

from __future__ import annotations

import pandas as pd

from specsweep.config import SearchSpec
from specsweep.search.model import SpecModel
from specsweep.search.planner import next_step
from tests.unit.search.test_model import LEVELS, chunk_requests, synthetic, true_thr, variant
from tests.unit.search.test_planner import GRID, PROFILES, OfflineRun

CHAIN, HELD_OUT = variant(5), variant(3)


def one_token_chunks(requests: pd.DataFrame) -> pd.DataFrame:
    """The same requests as a client that counted each chunk as one token stored them
    (rows written before the check): the chunk count, not the tokens."""
    ones = [[1] * len(chunks) for chunks in requests["chunk_tokens"]]
    return requests.assign(chunk_tokens=ones, max_chunk_tokens=1)


def openai_levels() -> pd.DataFrame:
    """Level rows as an OpenAI endpoint gives them: no verify steps, so no accept length."""
    return synthetic([CHAIN]).assign(accept_length=None)


def test_chunks_that_do_not_add_up_are_not_read_as_no_acceptance():
    model = SpecModel.fit(openai_levels(), one_token_chunks(chunk_requests(CHAIN)))
    assert model.predict(HELD_OUT, 1) is None  # not "the baseline's throughput, ±75%"
    assert model.blind is not None and "do not add up" in model.blind
    assert "load.endpoint: generate" in model.blind


def test_chunks_stored_as_unknown_leave_the_model_blind_and_say_why():
    requests = chunk_requests(CHAIN).assign(chunk_tokens=None, max_chunk_tokens=None)
    levels = openai_levels().assign(chunk_tokens_unknown=40)
    model = SpecModel.fit(levels, requests)
    assert model.predict(HELD_OUT, 8) is None
    assert "continuous_usage_stats" in (model.blind or "")


def test_accept_lengths_from_generate_are_used_when_the_chunks_cannot_be():
    levels = synthetic([CHAIN])  # /generate: meta_info's spec_verify_ct gives accept lengths
    model = SpecModel.fit(levels, one_token_chunks(chunk_requests(CHAIN)))
    acc = model.describe()["acceptance"]
    assert isinstance(acc, dict) and acc["source"] == "means"
    assert model.blind is None
    for c in LEVELS:
        p = model.predict(HELD_OUT, c)
        assert p is not None and p.lo <= true_thr(HELD_OUT, c) <= p.hi


def test_chunks_that_add_up_still_pin_acceptance():
    model = SpecModel.fit(openai_levels(), chunk_requests(CHAIN))
    acc = model.describe()["acceptance"]
    assert isinstance(acc, dict) and acc["source"] == "chunks"


def test_the_search_says_it_is_searching_blind_and_why():
    run = OfflineRun(PROFILES["default"], SearchSpec(mode="adaptive"))
    measure = run.measure

    def like_openai_without_usage(v):  # the rows such a server leaves: no accept length
        measure(v)
        for row in run.rows:
            if not row["is_baseline"] and row["status"] == "ok":
                row.update(accept_length=None, chunk_tokens_unknown=row["completed"])

    run.measure = like_openai_without_usage  # type: ignore[method-assign]
    tried: set[str] = set()
    whys = []
    for _ in range(len(GRID) + 1):
        step = next_step(run.spec, GRID, [1, 2, 4, 8, 16, 32, 64], run.so_far(), tried)
        whys.append(step.why)
        if step.launch is None:
            break
        tried.add(step.launch.label)
        run.measure(step.launch)
    blind = [w for w in whys if "searching blind" in w]
    assert blind, whys
    assert all("do not add up to the server's usage" in w for w in blind)
    assert len(run.order) == len(GRID)  # nothing ruled out on a model that knows nothing
