"""Metric maths against hand-computed values (numpy's definitions, hardcoded)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from specsweep.loadgen.metrics import (
    RequestRecord,
    compute_level_metrics,
    compute_pass_metrics,
    percentile,
    throughput_cv,
)
from specsweep.results.intervals import steady_tokens, steady_window


def rec(
    start: float,
    chunks: list[tuple[float, int]],
    end: float,
    *,
    index: int = 0,
    prompt: int = 10,
    verify: int | None = None,
    error: str | None = None,
) -> RequestRecord:
    tokens = sum(n for _, n in chunks)
    return RequestRecord(
        index=index,
        start=start,
        end=end,
        chunk_times=tuple(t for t, _ in chunks),
        chunk_tokens=tuple(n for _, n in chunks),
        prompt_tokens=prompt,
        output_tokens=0 if error else tokens,
        finish_reason=None if error else "length",
        spec_verify_ct=verify,
        spec_accept_length=tokens / verify if verify else None,
        error=error,
    )


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 90, 3.7),
        ([1, 2, 3, 4], 99, 3.97),
        ([3, 1, 2], 25, 1.5),
        ([15, 20, 35, 40, 50], 40, 29.0),
        (list(range(1, 11)), 90, 9.1),
        (list(range(1, 11)), 99, 9.91),
        ([7.0], 99, 7.0),
        ([5, 1], 0, 1.0),
        ([5, 1], 100, 5.0),
    ],
)
def test_percentile_matches_numpy_linear(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 50))


def test_multi_token_chunk_splits_itl_evenly() -> None:
    r = rec(0.0, [(0.1, 1), (0.3, 3)], 0.35)
    assert r.ok
    assert r.ttft == pytest.approx(0.1)
    assert r.itls == pytest.approx([0.2 / 3] * 3)
    assert r.itls[0] == pytest.approx(0.0667, abs=1e-4)
    assert r.e2e == pytest.approx(0.35)
    assert r.tpot == pytest.approx((0.35 - 0.1) / 3)


def test_single_token_has_no_tpot_and_no_itl() -> None:
    r = rec(1.0, [(1.5, 1)], 1.6)
    assert r.tpot is None
    assert r.itls == []
    assert r.ttft == pytest.approx(0.5)


def test_first_chunk_tokens_do_not_count_as_itl() -> None:
    # Like sglang's client: the first chunk only defines TTFT.
    r = rec(0.0, [(0.1, 2), (0.2, 1)], 0.2)
    assert r.itls == pytest.approx([0.1])
    assert r.tpot == pytest.approx(0.1 / 2)


def test_level_metrics_by_hand() -> None:
    records = [
        rec(0.0, [(0.1, 1), (0.3, 3)], 0.4, index=0),
        rec(0.2, [(0.4, 1), (0.5, 1)], 0.6, index=1),
        rec(0.5, [], 1.0, index=2, error="HTTP 500: boom"),
    ]
    m = compute_level_metrics(records, concurrency=2, max_error_rate=0.5)
    assert (m.concurrency, m.completed, m.failed) == (2, 2, 1)
    assert m.error_rate == pytest.approx(1 / 3)
    assert m.duration_s == pytest.approx(1.0)  # failed requests still span the level
    assert (m.input_tokens, m.output_tokens) == (20, 6)
    # The window: the first two have a token at 0.4, the (N-C+1) = 2nd end is 0.6. In
    # (0.4, 0.6] arrived one token (r1's at 0.5), half of r1's two chunks.
    assert m.steady_window_s == pytest.approx(0.2)
    assert m.output_throughput == pytest.approx(1 / 0.2)
    assert m.request_throughput == pytest.approx(0.5 / 0.2)
    assert m.total_throughput == pytest.approx(5.0 * 26 / 6)  # output x (in + out) / out
    assert m.achieved_concurrency == pytest.approx(0.8)
    assert (m.ttft_ms_mean, m.ttft_ms_p50, m.ttft_ms_p90, m.ttft_ms_p99) == pytest.approx(
        (150.0, 150.0, 190.0, 199.0)
    )
    # ITL values (ms): 66.67 x3 from the 3-token chunk, then 100.
    assert (m.itl_ms_mean, m.itl_ms_p50, m.itl_ms_p90, m.itl_ms_p99) == pytest.approx(
        (75.0, 200 / 3, 90.0, 99.0)
    )
    assert (m.tpot_ms_mean, m.tpot_ms_p50, m.tpot_ms_p99) == pytest.approx((150.0, 150.0, 199.0))
    assert (m.e2e_ms_mean, m.e2e_ms_p50, m.e2e_ms_p99) == pytest.approx((400.0, 400.0, 400.0))
    assert m.decode_tok_s_per_stream == pytest.approx((10.0 + 5.0) / 2)
    assert m.accept_length is None  # baseline: nobody reports spec_verify_ct
    assert m.status == "ok"
    assert m.error == "1 of 3 requests: HTTP 500: boom"


def test_status_failed_above_max_error_rate() -> None:
    records = [rec(0.0, [(0.1, 1)], 0.2), rec(0.0, [], 0.1, error="timeout after 5s")]
    assert compute_level_metrics(records, 1, max_error_rate=0.5).status == "ok"
    m = compute_level_metrics(records, 1, max_error_rate=0.05)
    assert m.status == "failed"
    assert m.error == "1 of 2 requests: timeout after 5s"


def test_most_common_error_is_reported() -> None:
    records = [
        rec(0.0, [], 0.1, error="a"),
        rec(0.0, [], 0.1, error="b"),
        rec(0.0, [], 0.1, error="b"),
    ]
    m = compute_level_metrics(records, 3, max_error_rate=1.0)
    assert m.status == "failed"  # nothing completed, whatever the threshold
    assert m.error == "2 of 3 requests: b"
    assert math.isnan(m.ttft_ms_mean)
    assert math.isnan(m.itl_ms_p99)
    assert m.output_throughput == 0.0


def test_no_records_at_all() -> None:
    m = compute_level_metrics([], 4, max_error_rate=0.05)
    assert (m.completed, m.failed, m.status) == (0, 0, "failed")
    assert m.error
    assert math.isnan(m.request_throughput)


def test_accept_length_is_run_scoped() -> None:
    records = [
        rec(0.0, [(0.1, 4), (0.2, 6)], 0.2, verify=4),
        rec(0.0, [(0.1, 10), (0.2, 10)], 0.2, verify=6),
        rec(0.0, [], 0.1, verify=1, error="connection error"),  # failed: excluded
    ]
    m = compute_level_metrics(records, 2, max_error_rate=0.5)
    # 30 tokens / 10 verify steps, not the mean of 2.5 and 3.33.
    assert m.accept_length == pytest.approx(3.0)


def test_as_dict_keeps_field_names() -> None:
    m = compute_level_metrics([rec(0.0, [(0.1, 1)], 0.1)], 1, 0.05)
    d = m.as_dict()
    assert d["concurrency"] == 1
    assert {"ttft_ms_p99", "itl_ms_mean", "tpot_ms_p90", "e2e_ms_p50", "accept_length"} <= set(d)
    r = rec(0.0, [(0.1, 2)], 0.1).as_dict()
    assert r["chunk_tokens"] == [2]
    assert r["error"] is None


def test_steady_window_by_hand() -> None:
    # Closed loop, C=2, N=4: r2 replaces r1 at 2.5 and r3 replaces r0 at 3.0; the
    # (N-C+1) = 3rd end (4.5) leaves one stream idle for good.
    records = [
        rec(0.0, [(1.0, 1), (2.0, 1), (3.0, 1)], 3.0, index=0),
        rec(0.0, [(1.5, 1), (2.5, 1)], 2.5, index=1),
        rec(2.5, [(3.5, 1), (4.5, 1)], 4.5, index=2),
        rec(3.0, [(4.0, 1), (5.0, 1)], 5.0, index=3),
    ]
    assert steady_window(records, 2) == (1.5, 4.5)
    # In (1.5, 4.5]: 2.0, 3.0 | 2.5 | 3.5, 4.5 | 4.0 -> 6 tokens.
    assert steady_tokens(records, 1.5, 4.5) == pytest.approx(6.0)
    m = compute_level_metrics(records, 2, 0.05)
    assert m.steady_window_s == pytest.approx(3.0)
    assert m.output_throughput == pytest.approx(2.0)  # the window's: no ramp, no drain
    assert m.steady_output_throughput == m.output_throughput
    # requests: r0 2 of 3 chunks, r1 1 of 2, r2 2 of 2, r3 1 of 2 -> 8/3 requests
    assert m.request_throughput == pytest.approx(8 / 3 / 3.0)


def test_a_pass_counts_what_arrived_in_its_window_from_any_pass() -> None:
    # One closed loop of C=1: pass 0 (r0, r1) then pass 1 (r2, r3), one stream, no gap.
    # Each pass's window is its first token to its last end; a token of the other pass
    # that arrives inside it counts (none here: one stream), and so does the level's.
    p0 = [
        rec(0.0, [(0.5, 1), (1.0, 1)], 1.0, index=0),
        rec(1.0, [(1.5, 1), (2.0, 1)], 2.0, index=1),
    ]
    p1 = [replace(rec(2.0, [(2.5, 2), (3.0, 2)], 3.0, index=i), repeat=1) for i in (0,)]
    p1.append(replace(rec(3.0, [(3.5, 2), (4.0, 2)], 4.0, index=1), repeat=1))
    m = compute_level_metrics(p0 + p1, 1, 0.05)
    assert m.repeats == 2
    assert m.output_throughput == pytest.approx((3 / 1.5 + 6 / 1.5) / 2)
    # two streams' passes overlapping in time: pass 1's window holds pass 0's late tokens
    a = [rec(0.0, [(1.0, 1), (2.0, 1)], 2.0, index=0), rec(0.0, [(1.0, 1), (3.0, 1)], 3.0, index=1)]
    b = [replace(rec(2.0, [(2.5, 1), (4.0, 1)], 4.0, index=0), repeat=1)]
    b.append(replace(rec(3.0, [(3.5, 1), (5.0, 1)], 5.0, index=1), repeat=1))
    alone = compute_pass_metrics(b, 2, 0.05)
    within = compute_pass_metrics(b, 2, 0.05, level=a + b)
    # b's window: (3.5, 4.0]; b's own token at 4.0 alone, with a's none (a ended at 3.0)
    assert alone.steady_window_s == pytest.approx(0.5)
    assert alone.output_throughput == pytest.approx(1 / 0.5) == within.output_throughput
    # a's window (1.0, 2.0] holds a's token at 2.0 and, from the level, none of b's
    assert compute_pass_metrics(a, 2, 0.05, level=a + b).output_throughput == pytest.approx(1.0)


def test_steady_window_counts_failures_for_time_not_tokens() -> None:
    records = [
        rec(0.0, [(1.0, 2), (2.0, 2)], 2.0, index=0),
        rec(0.0, [(1.0, 1), (1.5, 1)], 2.5, index=1, error="timeout after 2s"),
    ]
    t0, t1 = steady_window(records, 2)
    assert (t0, t1) == (1.0, 2.0)  # N == C: from the last first token to the first end
    assert steady_tokens(records, t0, t1) == pytest.approx(2.0)


def test_steady_tokens_scale_when_chunks_undercount() -> None:
    # An OpenAI stream without per-chunk usage: 2 text chunks, 6 tokens in total.
    r = RequestRecord(
        index=0, start=0.0, end=1.0, chunk_times=(0.4, 0.8), chunk_tokens=(1, 1),
        prompt_tokens=5, output_tokens=6, finish_reason="length",
        spec_verify_ct=None, spec_accept_length=None, error=None,
    )  # fmt: skip
    assert steady_tokens([r], 0.5, 1.0) == pytest.approx(3.0)


def test_no_steady_window() -> None:
    # The only request got no token: the window is empty.
    m = compute_level_metrics([rec(0.0, [], 0.5, error="HTTP 500: x")], 1, 0.05)
    assert m.steady_window_s == pytest.approx(0.5)  # no steady window: the whole span
    assert m.output_throughput == 0.0 == m.steady_output_throughput


def test_throughput_cv() -> None:
    records = [rec(0.0, [(0.1, 1)], 1.0)]
    one = compute_level_metrics(records, 1, 0.05)
    assert math.isnan(throughput_cv([one]))
    a = replace(one, output_throughput=100.0)
    b = replace(one, output_throughput=110.0)
    assert throughput_cv([a, b]) == pytest.approx(7.0710678 / 105.0)


def test_repeats_pool_latencies_and_average_throughputs() -> None:
    pass0 = [
        rec(0.0, [(0.1, 1), (0.2, 1)], 0.2, index=0),
        rec(0.0, [(0.3, 2)], 0.4, index=1),
    ]
    pass1 = [
        replace(rec(10.0, [(10.2, 1), (10.4, 3)], 11.0, index=0), repeat=1),
        replace(rec(10.0, [], 10.5, index=1, error="HTTP 500: boom"), repeat=1),
    ]
    p0 = compute_pass_metrics(pass0, 2, 0.6)
    p1 = compute_pass_metrics(pass1, 2, 0.6)
    m = compute_level_metrics(pass0 + pass1, 2, 0.6)
    assert (p0.repeats, p1.repeats, m.repeats) == (1, 1, 2)
    assert math.isnan(p0.output_throughput_cv)
    assert (m.completed, m.failed, m.output_tokens) == (3, 1, 8)
    assert m.error_rate == pytest.approx(0.25)
    assert m.duration_s == pytest.approx(0.4 + 1.0)  # summed, not 11.0 - 0.0
    assert m.output_throughput == pytest.approx((4 / 0.4 + 4 / 1.0) / 2)
    assert m.request_throughput == pytest.approx((2 / 0.4 + 1 / 1.0) / 2)
    assert m.output_throughput_cv == pytest.approx(throughput_cv([p0, p1]))
    # Latencies pool the samples of both passes: TTFTs 100, 300, 200 ms.
    assert m.ttft_ms_p50 == pytest.approx(200.0)
    assert m.ttft_ms_mean == pytest.approx(200.0)
    assert m.steady_window_s == pytest.approx(p0.steady_window_s + p1.steady_window_s)
    assert m.status == "ok" and m.error == "1 of 4 requests: HTTP 500: boom"


def test_record_dict_round_trip() -> None:
    r = replace(rec(0.0, [(0.1, 2), (0.3, 1)], 0.4, verify=2), repeat=3, category="chat")
    d = r.as_dict()
    assert d["repeat"] == 3 and d["chunk_times"] == [0.1, 0.3] and d["category"] == "chat"
    assert RequestRecord.from_dict(d) == r
    del d["category"]  # a record stored before categories existed
    assert RequestRecord.from_dict(d).category is None
