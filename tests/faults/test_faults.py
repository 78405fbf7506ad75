"""Faults while a server runs, one test each, with the simulator's fault knobs over real
HTTP and real processes: what specsweep observes, and that nothing measured is lost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specsweep.config import LoadSpec
from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import ServerDiedError
from specsweep.pipeline import VariantServer
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
    "(/health alternates 200 and 503), the first generation failing (seeded "
    "`SPECSWEEP_SIM_ERROR_RATE`)",
    outcome="the wait keeps polling until /health answers 200 and a one-token generation "
    "succeeds: a 200 whose generation fails is not ready, and the flap's 503 after it is "
    "polled through; the level is then measured normally",
)
def test_slow_and_flapping_health_still_reaches_ready(tmp_path, port):
    # seed 610 draws 0.095 first, then 39 draws >= 0.1: only the wait's first one-token
    # generation fails, so the wait sees /health 200 (generation failed), then the flap's
    # 503, then 200 with a generation
    config = config_with(
        tmp_path,
        port,
        SPECSWEEP_SIM_SLOW_HEALTH_S="0.4",
        SPECSWEEP_SIM_HEALTH_FLAP="1",
        SPECSWEEP_SIM_ERROR_RATE="0.1",
        SPECSWEEP_SIM_SEED="610",
    )
    with launched(config, BASELINE, "fault-run") as server:
        report = server.wait_for_health()
        states = [str(state) for _, state in report.transitions]
        assert states[-1] == "ready" and "healthy" in states, states
        answered = states[states.index("healthy") :]  # from the first 200 on
        assert answered == ["healthy", "warming", "ready"], states
        row = measure(server, 1)
        assert row["status"] == "ok" and row["failed"] == 0


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


# A writer that SIGKILLs itself inside its sixth write under the results root: every file
# opened for writing there (whichever way: io.open, os.fdopen, Path.open, os.write) gets
# half the bytes, flushed, then the process dies before the write returns. The first
# five writes are left alone and complete.
_WRITER = textwrap.dedent(
    """
    import builtins, io, json, os, signal, sys
    from specsweep.results.store import ResultsStore
    from tests.synthetic_levels import level_row

    root = os.path.realpath(sys.argv[1])
    armed = False

    def die_inside(path, data, write_part):
        half = len(data) // 2
        write_part(data[:half])
        print(json.dumps({"path": path, "written": half, "size": len(data)}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def ours(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        return path if path.startswith(root + os.sep) else None

    class Dying:
        def __init__(self, fh, path):
            self.fh, self.path = fh, path
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return self.fh.__exit__(*exc)
        def __getattr__(self, name):
            return getattr(self.fh, name)
        def write(self, data):
            die_inside(self.path, bytes(data), lambda part: (self.fh.write(part), self.fh.flush()))

    real_open, real_write = io.open, os.write

    def open_(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        path = ours(fh.fileno()) if armed and set(mode) & set("wax+") else None
        return Dying(fh, path) if path else fh

    def write_(fd, data):
        path = ours(fd) if armed else None
        if path:
            die_inside(path, bytes(data), lambda part: real_write(fd, part))
        return real_write(fd, data)

    io.open = builtins.open = open_
    os.write = write_

    store = ResultsStore(root)
    for c in range(6):
        armed = c == 5
        store.write_level(level_row("r", "v", c, 100.0 * (c + 1), target="t"))
    print("the sixth write returned", flush=True)
    """
)


@fault(
    "Writer killed mid-write",
    injected="SIGKILL of a process inside a level file's write, half its bytes on disk "
    "(the write is wrapped in that process only)",
    outcome="the half-written bytes are in a hidden `.tmp` file; every file under its final "
    "name is complete, readers (`read_levels`) see only those, and the killed level is not "
    "measured (`has_level` is false: a resume measures it again)",
)
def test_a_writer_killed_mid_write_leaves_no_partial_file(tmp_path):
    root = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-c", _WRITER, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    died = json.loads(proc.stdout.splitlines()[-1])
    partial = Path(died["path"])
    # The kill landed inside the write: part of the file's bytes are on disk.
    assert 0 < partial.stat().st_size == died["written"] < died["size"]
    folder = root.resolve() / "levels" / "r"
    assert partial.parent == folder
    assert partial.name.startswith(".") and partial.suffix == ".tmp", partial.name
    finals = sorted(folder.glob("*.parquet"))
    assert sorted(folder.iterdir()) == sorted([*finals, partial])
    assert [p.name for p in finals] == [f"v__c{c:05d}@t.parquet" for c in range(5)]
    for path in finals:
        assert pq.read_table(path).num_rows == 1
    store = ResultsStore(root)
    levels = store.read_levels("r")
    assert sorted(levels["concurrency"]) == [0, 1, 2, 3, 4]
    assert not store.has_level("r", "v", 5, "t") and not store.has_level("r", "v", 5)
