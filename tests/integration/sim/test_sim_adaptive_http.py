"""Adaptive speculation (``--speculative-adaptive``) on a real simulator process: the
step count follows the running batch through HTTP load, the switch lines carry
``SGLANG_LOG_MS`` stamps, unsupported setups fall back to static params, and the
simulated release decides whether the flag exists."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests

from tests.integration.sim.sim_proc import free_port, running, spawn, stop, wait_ready

pytestmark = pytest.mark.integration

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft"]
MS_STAMP = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] "
PROMPT = 4000  # long prefills: the 16 requests all join before the first decode cycle
NEW = 48


async def _generate(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    body = {
        "input_ids": [7] * PROMPT,
        "sampling_params": {"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True},
    }
    async with session.post(url + "/generate", json=body) as resp:
        assert resp.status == 200
        return (await resp.json())["meta_info"]


async def _load(url: str, concurrency: int, rounds: int) -> list[dict[str, Any]]:
    """``rounds`` waves of ``concurrency`` simultaneous requests."""
    out: list[dict[str, Any]] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for _ in range(rounds):
            wave = [_generate(session, url) for _ in range(concurrency)]
            out += await asyncio.gather(*wave)
    return out


def test_steps_follow_the_batch_through_http_load(tmp_path: Path):
    cfg = tmp_path / "tiers.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}}))
    port, log = free_port(), tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    flags = [*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", str(cfg)]
    env = {"SGLANG_LOG_MS": "1", "SPECSWEEP_SIM_TIME_SCALE": "0.25", "SPECSWEEP_SIM_SEED": "3"}
    with running(port, *flags, log=log, **env) as proc:
        wait_ready(url, proc, timeout=30)
        single = asyncio.run(_load(url, 1, 2))
        crowd = asyncio.run(_load(url, 16, 1))
        after = asyncio.run(_load(url, 1, 1))
        info = requests.get(url + "/server_info", timeout=5).json()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    assert info["speculative_adaptive"] is True and info["speculative_num_steps"] == 1
    assert info["speculative_num_draft_tokens"] == 2 and info["version"] == "0.5.23-sim"
    for meta in single + after:  # alone: tier 1, a 1-step chain that accepts drafts
        assert meta["completion_tokens"] == NEW and meta["spec_num_correct_drafts"] > 0
        assert meta["spec_accept_length"] > NEW / (NEW - 1)
    for meta in crowd:  # 16 together: tier 8, steps 0, exactly one token per verify
        assert meta["completion_tokens"] == NEW and meta["spec_verify_ct"] == NEW - 1
        assert meta["spec_num_correct_drafts"] == 0
        # the first token comes from prefill, so sglang's completion_tokens / verify_ct
        # is NEW / (NEW - 1): 1.0 per verify cycle
        assert meta["spec_accept_length"] == pytest.approx(NEW / (NEW - 1))
        assert meta["spec_num_proposed_drafts"] == NEW - 1  # the initial 2 draft tokens - 1
    lines = log.read_text().splitlines()
    switches = [ln for ln in lines if "Switch adaptive runtime state" in ln]
    assert switches and all(re.match(MS_STAMP, ln) for ln in switches)
    bodies = [ln.split("] ", 1)[1] for ln in switches]
    assert bodies == [
        "Switch adaptive runtime state: steps 1 -> 0, draft_tokens 2 -> 1",
        "Switch adaptive runtime state: steps 0 -> 1, draft_tokens 1 -> 2",
    ]
    text = "\n".join(lines)
    assert re.search(
        MS_STAMP + r"AdaptiveSpeculativeParams initialized: steps=1, candidate_steps=\[1\]$",
        text,
        re.M,
    )
    assert re.search(MS_STAMP + r"Built adaptive runtime state steps=0: elapsed=", text, re.M)
    assert "Adaptive spec params updated" not in text  # one candidate per tier: no EMA moves
    uvicorn = [ln for ln in lines if "Uvicorn running on" in ln]
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] INFO:     ", uvicorn[0])


@pytest.mark.parametrize(
    ("flags", "reason", "env"),
    [
        (["--speculative-algorithm", "NGRAM"],
         "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)", {}),
        ([*EAGLE3, "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
          "--speculative-num-draft-tokens", "6"],
         "speculative_eagle_topk=2 (only topk=1 is supported)", {}),
        (EAGLE3, "the overlap scheduler (spec v2) is not supported",
         {"SGLANG_ENABLE_SPEC_V2": "True", "SPECSWEEP_SIM_SGLANG_VERSION": "0.5.15"}),
    ],
)  # fmt: skip
def test_unsupported_setups_fall_back_and_serve_static(tmp_path, flags, reason, env):
    port, log = free_port(), tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    with running(port, *flags, "--speculative-adaptive", log=log, **env) as proc:
        wait_ready(url, proc, timeout=30)
        metas = asyncio.run(_load(url, 2, 1))
        info = requests.get(url + "/server_info", timeout=5).json()
    assert info["speculative_adaptive"] is False
    version = env.get("SPECSWEEP_SIM_SGLANG_VERSION", "0.5.23")
    assert info["version"] == f"{version}-sim"
    assert all(m["spec_verify_ct"] > 0 for m in metas)
    text = log.read_text()
    warning = (
        f"] speculative_adaptive disabled: {reason}. Falling back to static speculative params."
    )
    assert warning in text
    assert "AdaptiveSpeculativeParams" not in text and "Switch adaptive" not in text


def test_releases_before_0_5_11_do_not_know_the_flag(tmp_path):
    log = tmp_path / "server.log"
    proc = spawn(free_port(), *EAGLE3, "--speculative-adaptive", log=log,
                 SPECSWEEP_SIM_SGLANG_VERSION="0.5.9")  # fmt: skip
    try:
        assert proc.wait(15) == 2
    finally:
        stop(proc)
    assert "unrecognized arguments: --speculative-adaptive" in log.read_text()


def test_a_bad_adaptive_config_exits_1_with_the_traceback(tmp_path):
    cfg = tmp_path / "tiers.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [1, -2]}}))
    log = tmp_path / "server.log"
    flags = [*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", str(cfg)]
    proc = spawn(free_port(), *flags, log=log)
    try:
        assert proc.wait(15) == 1
    finally:
        stop(proc)
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "ValueError: BS 1: candidate_steps must be a list of non-negative ints" in text
