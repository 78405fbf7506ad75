"""Every fault knob, reproduced on a real process over real HTTP."""

from __future__ import annotations

import signal
import socket
import time

import pytest
import requests

from tests.integration.sim.sim_proc import (
    children,
    free_port,
    is_gone,
    probe,
    running,
    wait_ready,
    wait_until,
)

pytestmark = pytest.mark.integration


def gen(url: str, n: int = 4, path: str = "/generate") -> requests.Response:
    if path == "/generate":
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": n}}
    else:
        body = {"model": "m", "prompt": "hi", "max_tokens": n}
    return requests.post(url + path, json=body, timeout=10)


def test_ready_is_cheap_and_tracks_startup(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"SPECSWEEP_SIM_LOAD_SECONDS": "0.5", "SPECSWEEP_SIM_WARMUP_SECONDS": "0.8"}
    with running(port, log=tmp_path / "s.log", SPECSWEEP_SIM_HEALTH_SECONDS="5", **env) as proc:
        seen = wait_ready(url, proc, path="/ready")  # each probe has a 2 s timeout
        assert seen == ["refused", "503", "200"]
        assert requests.get(url + "/ready", timeout=2).text == ""  # no 5 s generation
        with pytest.raises(requests.Timeout):
            requests.get(url + "/health", timeout=1)  # /health does generate


def test_crash_after_n_requests(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running(port, log=tmp_path / "s.log", SPECSWEEP_SIM_CRASH_AFTER_REQUESTS="3") as proc:
        wait_ready(url, proc)
        kids = children(proc)
        assert [gen(url).status_code for _ in range(2)] == [200, 200]
        assert gen(url, path="/v1/completions").status_code == 200  # the 3rd completes
        assert proc.wait(10) == -signal.SIGKILL
        wait_until(lambda: all(is_gone(k.pid) for k in kids), 10, "children to die")
    text = (tmp_path / "s.log").read_text()
    assert "Scheduler hit an exception" in text and "CUDA out of memory" in text


def normal_phase_s(tmp_path, phase: str) -> float:
    """How long the phase takes a server without the hang, on this box, now."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "normal.log"
    with running(port, log=log) as proc:
        wait_until(lambda: "Load weight begin" in log.read_text(), 10)
        began = time.monotonic()
        if phase == "warmup":
            wait_until(lambda: probe(url) == "503", 10)
            began = time.monotonic()
        wait_ready(url, proc)
        return time.monotonic() - began


@pytest.mark.parametrize("phase", ["load", "warmup"])
def test_hang_stays_alive_without_progress(tmp_path, phase):
    # the hung server is watched for three times what the phase and the rest of the
    # start took a normal one just now: a fixed second is no bound on a loaded box
    watch_s = 3 * normal_phase_s(tmp_path, phase)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "s.log"
    with running(port, log=log, SPECSWEEP_SIM_HANG=phase) as proc:
        wait_until(lambda: "Load weight begin" in log.read_text(), 10)
        if phase == "warmup":
            wait_until(lambda: probe(url) == "503", 10)
        time.sleep(watch_s)  # the time it had to make progress, measured above
        assert proc.poll() is None
        assert probe(url) == ("refused" if phase == "load" else "503")
        assert probe(url, "/ready") == ("refused" if phase == "load" else "503")
        proc.send_signal(signal.SIGTERM)  # a wedged server still stops on TERM
        assert proc.wait(5) == 0
    text = log.read_text()
    assert "Load weight end" not in text if phase == "load" else "Uvicorn running" in text
    assert "fired up and ready to roll" not in text


def test_slow_health(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running(port, log=tmp_path / "s.log", SPECSWEEP_SIM_SLOW_HEALTH_S="0.6") as proc:
        wait_ready(url, proc, path="/ready")
        started = time.monotonic()
        assert requests.get(url + "/health", timeout=10).status_code == 200
        assert time.monotonic() - started >= 0.5
        with pytest.raises(requests.Timeout):  # what a client with a short probe timeout sees
            requests.get(url + "/health_generate", timeout=0.2)


def test_flapping_health_after_ready(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running(port, log=tmp_path / "s.log", SPECSWEEP_SIM_HEALTH_FLAP="2") as proc:
        wait_ready(url, proc, path="/ready")
        codes = [probe(url) for _ in range(6)]
        assert codes == ["200", "200", "503", "503", "200", "200"]
        assert probe(url, "/ready") == "200" and gen(url).status_code == 200


def test_every_kth_request_fails_with_sglang_error_json(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"SPECSWEEP_SIM_ERROR_EVERY": "3", "SPECSWEEP_SIM_ERROR_STATUS": "503"}
    with running(port, log=tmp_path / "s.log", **env) as proc:
        wait_ready(url, proc)
        responses = [gen(url, path=p) for p in ["/generate"] * 3 + ["/v1/completions"] * 3]
        assert [r.status_code for r in responses] == [200, 200, 503, 200, 200, 503]
        assert set(responses[2].json()) == {"error"} and responses[2].json()["error"]["message"]
        err = responses[5].json()
        assert err["object"] == "error" and err["code"] == 503 and err["param"] is None
        assert err["type"] == "ServiceUnavailableError" and err["message"]
        assert proc.poll() is None


def test_error_rate_one_fails_every_request(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running(port, log=tmp_path / "s.log", SPECSWEEP_SIM_ERROR_RATE="1") as proc:
        wait_ready(url, proc)
        assert {gen(url).status_code for _ in range(4)} == {500}
        assert probe(url) == "200"  # health does not generate through the fault path


def _bind_error(port: int) -> str:
    return (
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
        "address already in use"
    )


def test_port_already_taken_fails_at_bind_like_uvicorn(tmp_path):
    port = free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        with running(port, log=tmp_path / "s.log") as proc:
            assert proc.wait(15) == 3  # uvicorn's STARTUP_FAILURE
    finally:
        holder.close()
    text = (tmp_path / "s.log").read_text()
    assert _bind_error(port) in text and "Load weight end" in text  # after loading
    assert text.index("Application startup complete") < text.index("[Errno 98]")
    assert "Uvicorn running" not in text


def test_port_in_use_knob_reproduces_it_on_a_free_port(tmp_path):
    port = free_port()
    with running(port, log=tmp_path / "s.log", SPECSWEEP_SIM_PORT_IN_USE="1") as proc:
        assert proc.wait(15) == 3
    assert _bind_error(port) in (tmp_path / "s.log").read_text()
