"""Faults while a server runs, one test each, with the simulator's fault knobs over real
HTTP and real processes: what specsweep observes, and that nothing measured is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specsweep.config import LoadSpec
from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import ConfigError, ServerDiedError
from specsweep.pipeline import VariantServer
from specsweep.results.preflight import check_results_dir
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data
from tests.faults.registry import fault
from tests.integration.sim_server import launched, ready_server
from tests.needs import missing

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def config_with(tmp_path: Path, port: int, load: dict | None = None, **env: str):
    data = sim_config_data(tmp_path, port)
    data["server"]["env"].update(env)
    data["load"].update(load or {})
    return parse_config(data)


def measure(server: VariantServer, concurrency: int, load: LoadSpec | None = None):
    """One level on a ready server, written under run `fault-run` (with another load)."""
    if load is not None:
        server.load = load
    return server.benchmark_level(concurrency)


@fault(
    "Server crashes in the middle of a level",
    injected="`SPECSWEEP_SIM_CRASH_AFTER_REQUESTS=6` (a scheduler exception while serving)",
    outcome="the level is written with its completed and failed requests and status "
    "`failed`; the dead server then ends the variant with `ServerDiedError` and the log "
    "tail (no more levels are tried against it)",
)
def test_crash_mid_level_keeps_the_level_and_ends_the_variant(tmp_path, port):
    config = config_with(
        tmp_path,
        port,
        {"requests_per_stream": 8, "output_len": 64},
        SPECSWEEP_SIM_CRASH_AFTER_REQUESTS="6",
    )
    with ready_server(config, BASELINE, "fault-run") as server:
        row = measure(server, 2)
        assert row["status"] == "failed" and row["failed"] > 0 and row["completed"] >= 4
        with pytest.raises(ServerDiedError, match="died during the level") as info:
            server.ensure_alive("the level")
        assert info.value.log_tail
        # the first line names the root cause from the log: the scheduler's exception
        first = str(info.value).splitlines()[0]
        assert "Error" in first.partition("died during the level: ")[2], first
    store = ResultsStore(config.results_dir)
    assert store.has_level("fault-run", "baseline", 2)
    requests = store.read_requests("fault-run")
    assert len(requests) == row["completed"] + row["failed"]
    assert requests["error"].notna().sum() == row["failed"]


@fault(
    "5xx bursts during a level",
    injected="`SPECSWEEP_SIM_ERROR_EVERY=4` (every 4th request answers HTTP 500)",
    outcome="failed requests are counted with sglang's error message; the level is `failed` "
    "when the error rate exceeds `load.max_error_rate`, `ok` otherwise; both are written",
)
def test_5xx_bursts_are_counted_and_judged_by_the_error_budget(tmp_path, port):
    config = config_with(tmp_path, port, {"requests_per_stream": 4}, SPECSWEEP_SIM_ERROR_EVERY="4")
    with ready_server(config, BASELINE, "fault-run") as server:
        strict = measure(server, 2)
        lenient_load = config.load.model_copy(update={"max_error_rate": 0.5})
        lenient = measure(server, 4, lenient_load)
    assert strict["status"] == "failed" and strict["failed"] >= 2
    assert lenient["status"] == "ok" and lenient["failed"] >= 2
    assert "500" in (strict["error"] or "")
    requests = ResultsStore(config.results_dir).read_requests("fault-run")
    assert requests["error"].dropna().str.contains("simulated fault").all()


@fault(
    "Streams dropped mid-response",
    injected="`SPECSWEEP_SIM_DROP_EVERY=3` (every 3rd stream cut after its first chunk)",
    outcome="a cut stream is a failed request (`connection error: server closed the connection`), "
    "never counted as "
    "completed with its partial tokens; the level row and every request row are written",
)
def test_dropped_streams_are_failed_requests(tmp_path, port):
    config = config_with(tmp_path, port, {"requests_per_stream": 3}, SPECSWEEP_SIM_DROP_EVERY="3")
    with ready_server(config, BASELINE, "fault-run") as server:
        row = measure(server, 2)
    assert row["failed"] >= 2 and row["completed"] + row["failed"] == 6
    requests = ResultsStore(config.results_dir).read_requests("fault-run")
    cut = requests[requests["error"].notna()]
    assert len(cut) == row["failed"]
    assert cut["error"].str.contains("server closed the connection").all()
    assert (requests.loc[requests["error"].isna(), "output_tokens"] == 16).all()


@fault(
    "Slow and flapping health",
    injected="`SPECSWEEP_SIM_SLOW_HEALTH_S=0.4` and `SPECSWEEP_SIM_HEALTH_FLAP=1` "
    "(/health alternates 200 and 503)",
    outcome="the wait keeps polling until /health answers 200 and a one-token generation "
    "succeeds; the level is then measured normally",
)
def test_slow_and_flapping_health_still_reaches_ready(tmp_path, port):
    config = config_with(
        tmp_path, port, SPECSWEEP_SIM_SLOW_HEALTH_S="0.4", SPECSWEEP_SIM_HEALTH_FLAP="1"
    )
    with launched(config, BASELINE, "fault-run") as server:
        report = server.wait_for_health()
        assert report.transitions[-1][1] == "ready" and report.polls >= 2
        assert measure(server, 1)["status"] == "ok"


@fault(
    "Results directory not writable",
    injected="`results_dir` below a regular file",
    outcome="`ConfigError` naming the directory before anything is launched",
)
def test_unwritable_results_dir_is_refused_before_launch(tmp_path, port):
    blocker = tmp_path / "file"
    blocker.write_text("")
    data = sim_config_data(tmp_path, port)
    data["results_dir"] = str(blocker / "results")
    with pytest.raises(ConfigError, match="is not writable"):
        check_results_dir(parse_config(data), 2)


_IN_TINY_TMPFS = textwrap.dedent(
    """
    import subprocess, sys
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + sys.argv[1], "tmpfs", sys.argv[2]],
                   check=True)
    from specsweep.config.file import parse_config
    from specsweep.errors import ConfigError
    from specsweep.results.preflight import check_results_dir
    config = parse_config({"server": {"model_path": "m"}, "variants": [{}],
                           "results_dir": sys.argv[2] + "/results"})
    try:
        check_results_dir(config, 2)
    except ConfigError as exc:
        print(exc)
    """
)


def _in_tiny_disk(tmp_path: Path, size: str) -> str:
    """Run the pre-flight check on a real tmpfs of `size` (a user+mount namespace: no root
    needed, nothing mounted outside the child)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    proc = subprocess.run(
        ["unshare", "-Urm", sys.executable, "-c", _IN_TINY_TMPFS, size, str(mnt)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        missing("USERNS", f"no user namespaces here (unshare -Urm): {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@fault(
    "Disk full",
    injected="`results_dir` on a real 128 KiB / 4 MiB tmpfs (user namespace)",
    outcome='`ConfigError` before anything is launched: "the disk is full" when a probe '
    "write fails with ENOSPC, or the free space against the sweep's estimated output",
)
def test_full_disk_is_refused_before_launch(tmp_path):
    assert "is not writable (the disk is full)" in _in_tiny_disk(tmp_path, "128k")
    assert "MiB free, the sweep may write" in _in_tiny_disk(tmp_path, "4m")


_WRITER = textwrap.dedent(
    """
    import sys
    from specsweep.results.store import ResultsStore
    store = ResultsStore(sys.argv[1])
    rows = [{"schema_version": 1, "run_id": "r", "sweep_kind": "k", "target": "t",
             "variant": "v", "concurrency": 1, "repeat": 0, "index": i, "output_tokens": 400,
             "chunk_offsets_ms": [0.5 * j for j in range(400)]} for i in range(500)]
    print("writing", flush=True)
    n = 0
    while True:
        store.write_requests("r", "v", n % 50, "t", rows)
        n += 1
    """
)


@fault(
    "Writer killed mid-write",
    injected="SIGKILL of a process writing 500-row request files in a loop",
    outcome="every file under its final name is a complete, readable Parquet file; only "
    "hidden `.tmp` files can be partial, and readers never see them",
)
def test_a_writer_killed_mid_write_leaves_no_partial_file(tmp_path):
    root = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    files = root / "requests" / "r"
    deadline = time.monotonic() + 120
    while len(list(files.glob("v__*.parquet"))) < 5:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.05)  # most likely in the middle of a write now
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finals = sorted(files.glob("*.parquet"))
    assert finals and all(not p.name.startswith(".") for p in finals)
    for path in finals:
        assert pq.read_table(path).num_rows == 500
    frame = ResultsStore(root).read_requests("r")
    assert len(frame) == 500 * len(finals)
