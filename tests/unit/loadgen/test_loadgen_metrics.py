"""Metric maths against hand-computed values (numpy's definitions, hardcoded)."""

from __future__ import annotations

import math

import pytest

from specsweep.loadgen.metrics import RequestRecord, compute_level_metrics, percentile


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
    assert m.request_throughput == pytest.approx(2.0)
    assert m.output_throughput == pytest.approx(6.0)
    assert m.total_throughput == pytest.approx(26.0)
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
