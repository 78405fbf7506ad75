"""The load generator against the simulator over real HTTP."""

from __future__ import annotations

import pytest

from specsweep.config import Variant
from specsweep.config.plan import BASELINE
from specsweep.loadgen.runner import run_level_sync
from tests.integration.sim_server import ready_server

pytestmark = pytest.mark.integration

SPEC = Variant(algorithm="EAGLE3", draft_model_path="sim/draft", num_steps=3, topk=1)


def test_baseline_level_counts_every_token(sim_config):
    with ready_server(sim_config, BASELINE):
        result = run_level_sync(sim_config.server.base_url, 4, sim_config.load)
    m = result.metrics
    n = sim_config.load.num_requests(4)
    assert (m.completed, m.failed, m.status) == (n, 0, "ok")
    assert m.output_tokens == n * sim_config.load.output_len
    assert m.input_tokens == n * sim_config.load.input_len
    assert m.accept_length is None
    assert all(set(r.chunk_tokens) == {1} for r in result.records)
    assert 0 < m.ttft_ms_p50 <= m.e2e_ms_p50 and m.output_throughput > 0


def test_speculative_level_has_multi_token_chunks_and_run_scoped_accept(sim_config):
    with ready_server(sim_config, SPEC):
        result = run_level_sync(sim_config.server.base_url, 2, sim_config.load)
    m = result.metrics
    assert m.status == "ok" and m.failed == 0
    assert 1.0 < m.accept_length <= 4.0  # at most num_steps + 1 tokens per verify
    assert any(max(r.chunk_tokens) > 1 for r in result.records)
    for r in result.records:
        assert sum(r.chunk_tokens) == r.output_tokens == sim_config.load.output_len
        assert len(r.itls) == r.output_tokens - r.chunk_tokens[0]
    verify = sum(r.spec_verify_ct for r in result.records)
    assert m.accept_length == pytest.approx(m.output_tokens / verify)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_openai_endpoints_count_tokens_per_chunk_exactly(sim_config, endpoint):
    load = sim_config.load.model_copy(update={"endpoint": endpoint})
    with ready_server(sim_config, SPEC):
        result = run_level_sync(sim_config.server.base_url, 2, load)
    m = result.metrics
    assert m.status == "ok", m.error
    for r in result.records:
        assert sum(r.chunk_tokens) == r.output_tokens == load.output_len
    assert any(max(r.chunk_tokens) > 1 for r in result.records)  # continuous usage stats
