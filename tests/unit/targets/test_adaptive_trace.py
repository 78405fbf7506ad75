"""Reading which step count an adaptive server ran from its log (sglang's own lines)."""

import pytest

from specsweep.targets.adaptive_trace import (
    AdaptiveTrace,
    adaptive_initialized,
    fallback_reason,
)

STARTUP = """\
[2026-12-01 10:00:00.000 TP0] AdaptiveSpeculativeParams initialized: steps=1, candidate_steps=[1]
[2026-12-01 10:00:00.100 TP0] Built adaptive runtime state steps=0: elapsed=0.01s, mem=0.00GB
[2026-12-01 10:00:01.000] The server is fired up and ready to roll!
"""


def line(ts: str, msg: str) -> str:
    return f"[2026-12-01 10:00:{ts} TP0] {msg}\n"


def switch(ts: str, a: int, b: int) -> str:
    return line(
        ts, f"Switch adaptive runtime state: steps {a} -> {b}, draft_tokens {a + 1} -> {b + 1}"
    )


def test_time_between_switch_lines_is_the_share_of_each_step_count():
    trace = AdaptiveTrace(initial_steps=1)
    trace.skip(STARTUP)
    level = (
        line("10.000", "Prefill batch. #new-seq: 8")
        + switch("11.000", 1, 0)  # 1 s at steps 1
        + line("12.000", "Decode batch. #running-req: 8")
        + switch("14.000", 0, 1)  # 3 s at steps 0
        + line("15.000", "Decode batch. #running-req: 8")  # 1 s at steps 1
    )
    assert trace.level_shares(level) == pytest.approx({0: 0.6, 1: 0.4})
    assert trace.steps == 1 and trace.switches == 2


def test_the_state_carries_across_levels_and_between_them():
    trace = AdaptiveTrace(initial_steps=3)
    trace.skip(switch("01.000", 3, 1))  # between levels (e.g. sglang's own warmup)
    shares = trace.level_shares(line("02.000", "Prefill") + line("04.500", "Decode"))
    assert shares == {1: 1.0}
    trace.skip(switch("05.000", 1, 0))
    assert trace.level_shares(line("06.000", "x") + line("07.000", "y")) == {0: 1.0}


def test_a_line_cut_by_a_read_is_kept_until_its_rest_arrives():
    trace = AdaptiveTrace(initial_steps=1)
    text = line("00.000", "a") + switch("01.000", 1, 0) + line("03.000", "b")
    cut = text.index("steps 1 -> 0") + 5
    first = trace.level_shares(text[:cut])  # the switch line is incomplete: not yet seen
    assert first == {1: 1.0}
    assert trace.level_shares(text[cut:]) == {0: 1.0}  # its rest: 1 -> 0 at 01.000


def test_whole_second_timestamps_and_no_lines():
    trace = AdaptiveTrace(initial_steps=1)
    same_second = (
        "[2026-12-01 10:00:05 TP0] a\n"
        "[2026-12-01 10:00:05 TP0] Switch adaptive runtime state: steps 1 -> 0, "
        "draft_tokens 2 -> 1\n"
    )
    assert trace.level_shares(same_second) == {0: 0.5, 1: 0.5}
    assert trace.level_shares("") is None
    assert trace.level_shares("no timestamp here\n") is None


def test_the_fallback_warning_and_the_startup_line_are_found():
    warn = (
        "[2026-12-01 10:00:00] speculative_adaptive disabled: speculative_eagle_topk=2 "
        "(only topk=1 is supported). Falling back to static speculative params.\n"
    )
    assert fallback_reason(warn) == "speculative_eagle_topk=2 (only topk=1 is supported)"
    assert fallback_reason(STARTUP) is None
    assert adaptive_initialized(STARTUP) and not adaptive_initialized(warn)


def test_uvicorns_whole_second_lines_do_not_run_the_clock_backwards():
    trace = AdaptiveTrace(initial_steps=0)
    level = (
        line("29.100", "Prefill batch")
        + '[2026-12-01 10:00:29] INFO:     127.0.0.1:5 - "POST /generate HTTP/1.1" 200 OK\n'
        + switch("29.300", 0, 3)
        + '[2026-12-01 10:00:29] INFO:     127.0.0.1:6 - "POST /generate HTTP/1.1" 200 OK\n'
        + switch("29.400", 3, 0)
        + line("29.900", "Decode batch")
    )
    assert trace.level_shares(level) == pytest.approx({0: 0.875, 3: 0.125})
