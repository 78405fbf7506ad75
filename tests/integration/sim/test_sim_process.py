"""The simulator as a real process on loopback: life cycle, crash knobs, signals, CLI errors."""

from __future__ import annotations

import signal
import time

import pytest
import requests

from tests.integration.sim.sim_proc import (
    free_port,
    probe,
    running,
    spawn,
    sse_chunks,
    stop,
    wait_ready,
)

pytestmark = pytest.mark.integration


def test_life_cycle_refused_then_503_then_200_then_sigterm(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    env = {"SPECSWEEP_SIM_LOAD_SECONDS": "1.0", "SPECSWEEP_SIM_WARMUP_SECONDS": "1.0"}
    spawned = time.monotonic()
    with running(port, "--stream-interval", "4", log=log, **env) as proc:
        seen = wait_ready(url, proc)
        boot = time.monotonic() - spawned  # 2 s of simulated load and warmup, and this box's pace
        assert seen == ["refused", "503", "200"]
        body = {"input_ids": [1] * 8, "sampling_params": {"max_new_tokens": 13}, "stream": True}
        chunks = sse_chunks(requests.post(url + "/generate", json=body, stream=True, timeout=10))
        assert chunks[-1] == "[DONE]"
        sizes = [len(c["output_ids"]) for c in chunks[:-1]]  # type: ignore[index]
        assert sizes == [1, 4, 4, 4]  # first token, then every 4 decode steps
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
        # about 0.1 s: a fraction of the start this box just took (a drain or a reload of
        # anything would take as long as the start), not a fixed number of seconds
        assert time.monotonic() - started < boot / 2
    text = log.read_text()
    order = [
        "Load weight begin",
        "Load weight end",
        "KV Cache is allocated",
        "Capture cuda graph begin",
        "Capture cuda graph end",
        "] INFO:     Uvicorn running on http://127.0.0.1",
        "The server is fired up and ready to roll!",
        "Received sigterm",
    ]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "Capture draft" not in text  # baseline: no draft model


def test_crash_during_load_never_binds(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    env = {"SPECSWEEP_SIM_CRASH": "load", "SPECSWEEP_SIM_LOAD_SECONDS": "30"}
    with running(port, log=log, **env) as proc:
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() - started < 15:
            assert probe(f"http://127.0.0.1:{port}") == "refused"
            time.sleep(0.02)
        assert proc.wait(1) != 0
    text = log.read_text()
    assert "torch.OutOfMemoryError: CUDA out of memory" in text
    assert "Scheduler hit an exception: Traceback (most recent call last)" in text
    assert "Uvicorn running" not in text


def test_crash_while_serving(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    env = {"SPECSWEEP_SIM_CRASH": "serve", "SPECSWEEP_SIM_CRASH_AFTER_S": "0.5"}
    with running(port, log=log, **env) as proc:
        wait_ready(f"http://127.0.0.1:{port}", proc)
        assert proc.wait(10) == -signal.SIGKILL  # kill_process_tree(own pid), as sglang
    text = log.read_text()
    assert "Scheduler hit an exception" in text and "Received sigquit from a child" in text


def test_speculative_startup_logs_draft_graphs(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    flags = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2"]
    flags += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5"]
    with running(port, *flags, log=log) as proc:
        wait_ready(f"http://127.0.0.1:{port}", proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(5) == 0
    text = log.read_text()
    assert "Max running requests is reset to 48 for speculative decoding" in text
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in text
    assert (
        "Capture draft cuda graph begin" in text and "Capture draft extend cuda graph end" in text
    )


@pytest.mark.parametrize(
    ("flags", "env", "code", "needle"),
    [
        (["--bogus-flag"], {}, 2, "unrecognized arguments: --bogus-flag"),
        (["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "2"], {}, 1,
         "AssertionError"),
        (
            ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"],
            {"SGLANG_ENABLE_SPEC_V2": "True"},
            1,
            "ValueError: Spec v2 currently only supports topk = 1",
        ),
    ],
)  # fmt: skip
def test_invalid_command_lines_fail_like_sglang(tmp_path, flags, env, code, needle):
    log = tmp_path / "server.log"
    proc = spawn(free_port(), *flags, log=log, **env)
    try:
        assert proc.wait(15) == code
    finally:
        stop(proc)
    assert needle in log.read_text()
