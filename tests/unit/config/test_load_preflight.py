"""What the load cannot measure is refused, and what it would measure differently is said,
before any launch."""

from __future__ import annotations

import resource

import pytest

from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.errors import ConfigError
from specsweep.loadgen.limits import ensure_open_files
from specsweep.workloads.preflight import check_load
from tests.conftest import sim_config_data


def _check(tmp_path, server=None, **load):
    config = parse_config(sim_config_data(tmp_path, 1, server=server or {}, load=load))
    return check_load(config, sweep_variants(config))


def test_a_shape_longer_than_the_context_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"shape in32768-out256: .* context length 16384"):
        _check(tmp_path, {"context_length": 16384}, input_len=[512, 32768], output_len=256)
    with pytest.raises(ConfigError, match="context length 131072"):  # the simulator's own
        _check(tmp_path, input_len=200000)
    assert _check(tmp_path, input_len=[512, 4096]) == []


def test_levels_above_the_running_cap_are_said_to_measure_the_queue(tmp_path):
    notes = _check(tmp_path, {"max_running_requests": 8}, concurrency=[1, 8, 32, 64])
    assert len(notes) == 1
    assert "above max_running_requests 8 (c=32, 64) measure the server's queue" in notes[0]


def test_random_ids_on_real_sglang_are_named_once(tmp_path):
    notes = _check(tmp_path, {"backend": "sglang"}, prompts="random")
    assert len(notes) == 1 and "random ids" in notes[0] and "prompts: builtin" in notes[0]
    assert _check(tmp_path, {"backend": "sglang"}) == []  # auto: the bundled text
    assert _check(tmp_path, prompts="random") == []  # the simulator models it: no warning


def test_a_bad_dataset_is_refused_naming_the_file_and_record(tmp_path):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "hello"}\n{"prompt": \n')
    with pytest.raises(ConfigError, match=r"load.dataset: .*prompts.jsonl: line 2"):
        _check(tmp_path, dataset=str(bad))


def test_more_streams_than_open_files_are_refused_or_the_limit_raised(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        with pytest.raises(ConfigError, match=f"this machine allows {hard}"):
            _check(tmp_path, concurrency=[hard + 1])
    assert ensure_open_files(min(soft, 64)) is None  # enough already: nothing said
    if soft < hard:
        note = ensure_open_files(soft + 1, apply=False)
        assert note and f"from {soft} to {soft + 1}" in note
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft  # only said
        try:
            assert "raised the open-file limit" in (ensure_open_files(soft + 1) or "")
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft + 1
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
