"""python -m specsweep.loadgen as a subprocess against the stub, and the result line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from specsweep.errors import WireError
from specsweep.loadgen.__main__ import main
from specsweep.loadgen.metrics import RequestRecord, compute_level_metrics
from specsweep.loadgen.runner import LevelResult
from specsweep.loadgen.wire import parse_result_line, result_line
from tests.unit.loadgen.stub_util import stub_process

REPO = Path(__file__).resolve().parents[3]


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specsweep.loadgen", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_cli_runs_a_level_and_the_result_rebuilds(tmp_path: Path) -> None:
    load = {"input_len": 8, "output_len": 6, "requests_per_level": 10, "repeats": 2}
    load_file = tmp_path / "load.json"
    load_file.write_text(json.dumps(load))
    with stub_process("--tokens-per-chunk", "1,2", "--itl-ms", "1") as url:
        out = loadgen("--base-url", url, "--concurrency", "3", "--load-file", str(load_file))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    events = [json.loads(line)["event"] for line in lines]
    assert events[-1] == "result" and set(events[:-1]) == {"progress"}
    last_progress = json.loads(lines[-2])
    assert (last_progress["done"], last_progress["total"]) == (20, 20)

    result = parse_result_line(lines[-1])
    assert len(result.records) == 20 and len(result.repeats) == 2
    assert {r.repeat for r in result.records} == {0, 1}
    assert result.metrics == compute_level_metrics(result.records, 3, 0.05)
    assert result.metrics.output_tokens == 120
    assert result.started_at.tzinfo is not None and result.started_at <= result.ended_at
    assert math.isnan(result.repeats[0].output_throughput_cv)  # null on the wire, NaN here
    assert result.metrics.accept_length == pytest.approx(1.5)


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "2", "--load", "{not json"],
        ["--concurrency", "2", "--load", '{"bogus_field": 1}'],
        ["--concurrency", "0"],
        ["--concurrency", "2", "--workers", "0"],
        ["--concurrency", "two"],
        ["--concurrency", "2", "--load-file", "/nonexistent/load.json"],
        ["--concurrency", "2", "--load", "{}", "--load-file", "x.json"],
        ["--concurrency", "2", "--drift", '{"sd": 0.01}'],
    ],
)
def test_bad_input_exits_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base-url", "http://127.0.0.1:9", *args]) == 2
    assert capsys.readouterr().out == ""


def test_the_runs_drift_reaches_a_remote_load_generator() -> None:
    drift = '{"sd": 0.01, "df": 7, "source": "calibrated"}'
    load = json.dumps({"input_len": 8, "output_len": 4, "requests_per_level": 4})
    with stub_process("--itl-ms", "1") as url:
        out = loadgen("--base-url", url, "--concurrency", "2", "--load", load, "--drift", drift)
    assert out.returncode == 0, out.stderr
    metrics = parse_result_line(out.stdout.splitlines()[-1]).metrics
    assert metrics.throughput_drift == 0.01 and metrics.throughput_drift_source == "calibrated"
    # one token per step: below the value the interval is the drift's alone, t with 7
    # degrees of freedom (above it, it may also reach the drain-free rate: the pass's tail,
    # which the stub's timing sets, results/intervals.py drain_loss)
    ci = metrics.output_throughput_ci
    assert (ci.value - ci.lo) / ci.value == pytest.approx(2.365 * 0.01)
    assert ci.hi >= ci.value * (1 + 2.365 * 0.01) - 1e-9


def test_cli_bad_url_exits_2() -> None:
    out = loadgen("--base-url", "ftp://host", "--concurrency", "1")  # the real entry point
    assert out.returncode == 2 and "http://" in out.stderr and out.stdout == ""


def test_result_line_round_trip_in_process() -> None:
    rec = RequestRecord(
        index=0, start=10.0, end=10.5, chunk_times=(10.1, 10.3), chunk_tokens=(1, 2),
        prompt_tokens=4, output_tokens=3, finish_reason="length",
        spec_verify_ct=2, spec_accept_length=1.5, error=None, repeat=0, category="code",
    )  # fmt: skip
    m = compute_level_metrics([rec], 1, 0.05)
    now = datetime.now(UTC)
    result = LevelResult(m, (rec,), now, now, (m,), perf_origin=9.75)
    back = parse_result_line(result_line(result).decode())
    assert back.records == result.records and back.records[0].category == "code"
    assert back.perf_origin == 9.75 and back.started_at == now
    assert math.isnan(back.metrics.output_throughput_cv) and back.metrics.accept_length == 1.5
    same = {k: v for k, v in m.as_dict().items() if not (isinstance(v, float) and math.isnan(v))}
    assert same.items() <= back.metrics.as_dict().items()
    with pytest.raises(WireError):
        parse_result_line('{"event": "progress", "done": 1, "total": 2}')
    with pytest.raises(WireError):
        parse_result_line("not json")
    with pytest.raises(WireError):
        parse_result_line('{"event": "result"}')
