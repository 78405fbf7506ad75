"""Profiles are data files: they load, validate, and reproduce their calibration points."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsweep.sim.perf_model import (
    SpecConfig,
    model_accept_length,
    model_tok_s,
    pivot_concurrency,
    steady_state_throughput,
)
from specsweep.sim.profiles import ProfileError, bundled_names, get_profile, load_file

EXPECTED = {"default", "seeds-kimi-k2", "seeds-kimi-k2-early", "llama-3.1-8b-eagle3-h200"}


def chain(steps: int) -> SpecConfig:
    return SpecConfig("EAGLE3", steps, 1, steps + 1)


def test_bundled_profiles_load_with_their_names_and_hardware():
    assert set(bundled_names()) >= EXPECTED
    for name in bundled_names():
        p = get_profile(name)
        assert p.name == name and p.description and p.assumptions
        assert p.gpu_count >= 1 and p.gpu_memory_mib > 10_000 and p.gpu_name.startswith("NVIDIA")
        assert p.load_seconds > 0 and p.health_seconds == 1.0
        assert p.calibration, f"{name} has no calibration points"
    kimi = get_profile("seeds-kimi-k2")
    assert (kimi.gpu_count, kimi.gpu_memory_mib) == (8, 97887)
    assert get_profile("llama-3.1-8b-eagle3-h200").gpu_memory_mib == 143771


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_calibration_points_hold_in_the_model(name):
    """The figures each profile claims to reproduce (docs/simulator.md) cannot drift."""
    p = get_profile(name)
    for point in p.calibration:
        if point.tok_s is not None:
            got = model_tok_s(p, point)
            assert got == pytest.approx(point.tok_s, rel=point.tolerance), point.label
        if point.accept_length is not None:
            assert point.spec is not None
            got = model_accept_length(p, point)  # at the point's text category
            assert got == pytest.approx(point.accept_length, rel=point.tolerance), point.label
        # every point says the context it was measured at (the seeds' are assumed)
        assert point.context is not None, point.label


def test_seeds_shape_two_steps_best_and_deep_chains_lose():
    p = get_profile("seeds-kimi-k2")
    base = steady_state_throughput(p, 1)
    by_steps = {s: steady_state_throughput(p, 1, chain(s)) for s in range(1, 11)}
    assert max(by_steps, key=by_steps.__getitem__) == 2 and by_steps[2] > base
    assert by_steps[10] < by_steps[5] < base
    tree = SpecConfig("EAGLE3", 5, 4, 16)
    for c in (48, 64, 128):
        ratio = steady_state_throughput(p, c, tree, 48) / steady_state_throughput(p, c)
        assert 0.35 < ratio < 0.6  # "the gap widened to over 2x at high concurrency"
    early = get_profile("seeds-kimi-k2-early")
    assert steady_state_throughput(early, 1, chain(10)) < steady_state_throughput(
        early, 1, chain(5)
    )


def test_single_gpu_profile_pivots_in_the_tens():
    p = get_profile("llama-3.1-8b-eagle3-h200")
    tree = SpecConfig("EAGLE3", 5, 8, 32)
    assert steady_state_throughput(p, 1, tree) / steady_state_throughput(p, 1) > 2
    pivot = pivot_concurrency(p, tree, max_running_requests=256)
    assert pivot is not None and 8 <= pivot <= 48


def test_a_profile_file_by_path_extending_a_bundled_one(tmp_path: Path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\nextends: default\nhardware: {gpu_name: NVIDIA A100-SXM4-80GB, gpu_count: 4}\n"
        "target: {t0_ms: 5.0}\n"
        "calibration:\n  - {label: c1, concurrency: 1, tok_s: 140, tolerance: 0.2}\n"
    )
    p = get_profile(str(path))
    base = get_profile("default")
    assert p.name == "mine" and p.gpu_count == 4 and p.t0_ms == 5.0
    assert p.a_req_ms == base.a_req_ms and p.gpu_memory_mib == base.gpu_memory_mib
    assert len(p.calibration) == 1 and p.calibration[0].tok_s == 140


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("target: {t0: 1}\n", "unknown key target.t0"),
        ("speed: 3\n", "unknown keys"),
        ("target: {t0_ms: fast}\n", "target.t0_ms must be a number"),
        ("target: {t0_ms: -1}\n", "must be >= 0"),
        ("hardware: {gpu_count: 1.5}\n", "must be an integer"),
        ("acceptance: {by_depth: [0.5, 2]}\n", "lie in [0, 1]"),
        ("calibration: [{label: x}]\n", "needs tok_s or accept_length"),
        ("calibration: [{label: x, tok_s: 1, spec: {algorithm: EAGLE3}}]\n", "spec needs"),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_bad_profile_files_say_what_is_wrong(tmp_path: Path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=needle.replace("[", r"\[").replace(".", r"\.")):
        load_file(path)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(KeyError, match="seeds-kimi-k2"):
        get_profile("nope")
