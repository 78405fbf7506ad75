"""Adaptive speculation's step slots and tier routing, against hand-computed traces of
sglang 0.5.23's ``AdaptiveStepSlot`` / ``AdaptiveSpeculativeParams``."""

from __future__ import annotations

import json

import pytest

from specsweep.sim.adaptive import (
    DEFAULT_ADAPTIVE_CONFIG,
    AdaptiveParams,
    AdaptiveStepSlot,
    candidate_steps_union,
    captured_batch_sizes,
    decode_cuda_graph_batch_sizes,
    load_adaptive_config,
)


def slot(initial: int, cands: list[int], **cfg) -> tuple[AdaptiveStepSlot, list[str]]:
    lines: list[str] = []
    return AdaptiveStepSlot(initial, {"candidate_steps": cands, **cfg}, lines.append), lines


def test_sglang_defaults_of_a_slot():
    s, _ = slot(3, [7, 1, 5, 3, 3])
    assert s.candidate_steps == [1, 3, 5, 7] and s.current_steps == 3
    assert s.ema_accept_len == 2.0  # current steps - 1
    assert (s.ema_alpha, s.update_interval, s.warmup_batches) == (0.2, 5, 10)
    assert (s.down_hysteresis, s.up_hysteresis, s.ceiling_coeff) == (-0.25, 0.0, 0)
    outside, _ = slot(4, [0, 1, 3])  # not a candidate: the middle one
    assert outside.current_steps == 1 and outside.ema_accept_len == 0.0


def test_default_warmup_and_interval_decide_on_the_15th_batch():
    s, lines = slot(3, [1, 3, 5, 7])
    decisions = [s.update([0, 0]) for _ in range(15)]
    assert decisions == [False] * 14 + [True]  # 10 warmup batches, then every 5th
    # EMA 2.0 * 0.8**15 = 0.07 <= 1 - 0.5 - 0.25: down to 1
    assert s.current_steps == 1 and s.ema_accept_len == pytest.approx(2 * 0.8**15)
    assert lines == ["Adaptive spec params updated: steps 3 -> 1 (ema_accept_len=0.07)"]


def test_up_then_down_trace():
    s, lines = slot(3, [1, 3, 5, 7], ema_alpha=0.5, warmup_batches=2, update_interval=3)
    emas, decisions = [], []
    for batch in ([4, 4], [4], [4], [4], [4]):
        decisions.append(s.update(batch))
        emas.append(s.ema_accept_len)
    assert emas == [3.0, 3.5, 3.75, 3.875, 3.9375]
    assert decisions == [False, False, False, False, True]
    # up: 3.94 > 3 - 0.5 -> 5; 3.94 <= 5 - 0.5 stops there
    assert s.current_steps == 5
    assert [s.update([0]) for _ in range(3)] == [False, False, True]
    # EMA 0.49: <= 3 - 0.5 - 0.25 (down to 3) but > 1 - 0.5 - 0.25 (not to 1)
    assert s.ema_accept_len == pytest.approx(0.4921875) and s.current_steps == 3
    assert lines == [
        "Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=3.94)",
        "Adaptive spec params updated: steps 5 -> 3 (ema_accept_len=0.49)",
    ]


def test_down_hysteresis_decides_how_far_down():
    kwargs = {"ema_alpha": 0.5, "warmup_batches": 0, "update_interval": 1}
    for down, landed in ((-0.25, 3), (0.0, 1)):
        s, _ = slot(5, [1, 3, 5], down_hysteresis=down, **kwargs)
        s.ema_accept_len = 0.98
        s.update([0])  # EMA 0.49: 0.25 < 0.49 <= 0.5
        assert s.current_steps == landed


def test_up_hysteresis_holds_a_step_up_back():
    for up, landed in ((0.0, 3), (0.6, 1)):
        s, _ = slot(1, [1, 3], ema_alpha=1.0, warmup_batches=0, update_interval=1, up_hysteresis=up)
        s.update([1])  # EMA 1.0 against 1 - 0.5 + up
        assert s.current_steps == landed


def test_zero_step_probe_resets_a_negative_ema():
    s, lines = slot(0, [0, 1, 3], ema_alpha=0.5, warmup_batches=1, update_interval=2,
                    down_hysteresis=0.0)  # fmt: skip
    assert s.ema_accept_len == -1.0
    assert [s.update([5]) for _ in range(3)] == [False, False, True]
    # at steps 0 the EMA is frozen; the probe goes one candidate up and starts at 1 - 1
    assert s.current_steps == 1 and s.ema_accept_len == 0.0
    assert [s.update([1]) for _ in range(2)] == [False, True]
    assert s.ema_accept_len == 0.75 and s.current_steps == 3  # 0.75 > 0.5 (not to 0), > 0.5 up
    assert lines == [
        "Adaptive spec params updated: steps 0 -> 1 (ema_accept_len=0.00)",
        "Adaptive spec params updated: steps 1 -> 3 (ema_accept_len=0.75)",
    ]


def test_down_to_zero_and_probe_back_keeps_a_non_negative_ema():
    s, lines = slot(1, [0, 1], ema_alpha=0.5, warmup_batches=0, update_interval=1,
                    down_hysteresis=0.0)  # fmt: skip
    assert s.update([0]) and s.current_steps == 0  # EMA 0.0 <= 0.5: no drafting
    assert s.update([3]) and s.current_steps == 1  # EMA frozen at 0.0, probe up
    assert s.ema_accept_len == 0.0
    assert s.update([]) is False and s.batch_count == 2  # an empty verify counts nothing
    assert lines[-1] == "Adaptive spec params updated: steps 0 -> 1 (ema_accept_len=0.00)"


def test_ceiling_caps_a_step_down_but_never_a_step_up():
    kwargs = {"ema_alpha": 1.0, "warmup_batches": 0, "update_interval": 1}
    plain, _ = slot(7, [1, 3, 5, 7], **kwargs)
    plain.update([2])  # EMA 2.0: down past 5 and 3's thresholds (4.25, 2.25), not 1's
    assert plain.current_steps == 3
    capped, lines = slot(7, [1, 3, 5, 7], ceiling_coeff=1.0, **kwargs)
    capped.update([2])  # ceiling max(1, ceil(2.0)) = 2 < 3: down to 1
    assert capped.current_steps == 1
    assert lines == ["Adaptive spec params updated: steps 7 -> 1 (ema_accept_len=2.00)"]
    rising, _ = slot(1, [1, 3, 5], ceiling_coeff=0.5, **kwargs)
    rising.update([4])  # ceiling 2, but 5 > old steps 1: not capped
    assert rising.current_steps == 5


def test_speculative_capture_list():
    sizes = decode_cuda_graph_batch_sizes(256)
    assert sizes[:9] == [1, 2, 3, 4, 5, 6, 7, 8, 10] and sizes[-3:] == [240, 248, 256]
    assert 36 not in sizes and 40 in sizes and 68 not in sizes and 72 in sizes
    assert len(sizes) == 8 + 12 + 7 + 24
    assert decode_cuda_graph_batch_sizes(48)[-4:] == [32, 40, 44, 48]
    assert decode_cuda_graph_batch_sizes(50)[-2:] == [48, 50]  # max_bs itself
    assert decode_cuda_graph_batch_sizes(300)[-4:] == [256, 272, 288, 300]
    assert decode_cuda_graph_batch_sizes(24, speculative=False) == [1, 2, 4, 8, 12, 16, 24]


def test_captured_sizes_of_the_server_args():
    args = {"cuda_graph_max_bs": 256, "cuda_graph_bs": None, "disable_cuda_graph": False}
    assert captured_batch_sizes(args) == decode_cuda_graph_batch_sizes(256)
    assert captured_batch_sizes({**args, "cuda_graph_bs": [16, 4, 8]}) == [4, 8, 16]
    assert captured_batch_sizes({**args, "disable_cuda_graph": True}) is None


@pytest.mark.parametrize(
    ("batch", "padded", "tier"),
    [(1, 1, 1), (7, 7, 1), (8, 8, 8), (9, 10, 8), (31, 32, 32), (33, 40, 32), (41, 44, 32),
     (61, 64, 64), (300, 300, 64)],
)  # fmt: skip
def test_routing_pads_to_captured_graph_sizes(batch, padded, tier):
    params = AdaptiveParams(3)  # the default tiers 1, 8, 32, 64
    params.set_cuda_graph_bs(decode_cuda_graph_batch_sizes(256))
    assert params.padded(batch) == padded and params.tier_for(batch) == tier


def test_routing_without_cuda_graphs_and_below_every_tier(tmp_path):
    params = AdaptiveParams(3)
    params.set_cuda_graph_bs(None)
    assert params.tier_for(31) == 8 and params.tier_for(33) == 32
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"4": {"candidate_steps": [1]}, "16": {"candidate_steps": [0]}}))
    high = AdaptiveParams(1, str(cfg))
    assert high.tier_for(2) == 4 and high.tier_for(20) == 16  # the smallest tier if none


def test_default_tiers_and_their_start():
    params = AdaptiveParams(3)
    assert params.tiers == [1, 8, 32, 64] and params.candidate_steps == [0, 1, 3, 5, 7]
    assert [params.slots[t].current_steps for t in params.tiers] == [3, 3, 1, 0]
    assert params.init_line() == (
        "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5, 7]"
    )
    assert params.slots[1].down_hysteresis == -0.25 and params.slots[8].down_hysteresis == 0.0


def test_verify_results_feed_the_slot_of_the_batch_size():
    params = AdaptiveParams(3)
    params.set_cuda_graph_bs(decode_cuda_graph_batch_sizes(256))
    params.on_verify_complete([1] * 9, batch_size=9)  # pads to 10: tier 8
    assert [params.slots[t].batch_count for t in params.tiers] == [0, 1, 0, 0]


def test_top_level_settings_reach_every_tier_unless_overridden(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({
        "ema_alpha": 0.5, "note": "ignored",
        "1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1], "ema_alpha": 0.9},
    }))  # fmt: skip
    params = AdaptiveParams(1, str(cfg))
    assert params.slots[1].ema_alpha == 0.5 and params.slots[8].ema_alpha == 0.9
    assert candidate_steps_union(str(cfg)) == [0, 1, 3]
    assert load_adaptive_config(None)[0] is DEFAULT_ADAPTIVE_CONFIG


@pytest.mark.parametrize(
    "steps", [[], "1,3", [1, -1], [1.5], None, [1, "3"]], ids=lambda s: repr(s)
)
def test_bad_candidate_steps_raise_sglang_message(tmp_path, steps):
    cfg = tmp_path / "a.json"
    entry = {} if steps is None else {"candidate_steps": steps}
    cfg.write_text(json.dumps({"1": entry}))
    with pytest.raises(ValueError) as exc:
        load_adaptive_config(str(cfg))
    assert str(exc.value) == (
        f"BS 1: candidate_steps must be a list of non-negative ints, got {steps!r}"
    )


def test_a_config_without_batch_size_keys_is_refused(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"ema_alpha": 0.3, "bs8": {"candidate_steps": [1]}}))
    with pytest.raises(ValueError) as exc:
        load_adaptive_config(str(cfg))
    assert str(exc.value) == (
        "speculative_adaptive_config must contain at least one integer-string BS key, "
        "e.g. {\"1\": {\"candidate_steps\": [1,3,7]}}. Got keys: ['ema_alpha', 'bs8']"
    )


def test_unreadable_config_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_adaptive_config(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(json.JSONDecodeError):
        load_adaptive_config(str(bad))
