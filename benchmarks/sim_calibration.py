"""Does the simulator reproduce the figures its profiles are calibrated to?

Each profile (``specsweep/sim/profiles/*.yaml``) lists the real measurements it was
fitted to. This script checks them end to end, the way specsweep measures a real
server: it starts ``python -m specsweep.sim.launch_server`` with the profile and the
point's sglang flags, waits for ``/ready``, and runs specsweep's own load generator
(closed loop, streaming ``/generate``, fixed lengths) at the point's concurrency.

To finish in a couple of minutes it compresses time with SPECSWEEP_SIM_TIME_SCALE,
chosen per point so that the simulated server streams at most about ``--rate`` chunks
per wall second (what one Python client and server sustain on two cores) and each
request still lasts ~0.4 wall seconds (so the real HTTP round trip between requests,
which time scaling would inflate, stays negligible); the measurement is converted
back: a throughput measured at scale s is reported as measured x s.

    .venv/bin/python benchmarks/sim_calibration.py                # all calibrated profiles
    .venv/bin/python benchmarks/sim_calibration.py --profile seeds-kimi-k2 --markdown
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from specsweep.config import LoadSpec
from specsweep.loadgen.runner import run_level_sync
from specsweep.sim.perf_model import (
    CalibrationPoint,
    PerfProfile,
    expected_accept_length,
    model_tok_s,
)
from specsweep.sim.profiles import get_profile

DEFAULT_PROFILES = ("seeds-kimi-k2", "seeds-kimi-k2-early", "llama-3.1-8b-eagle3-h200")
MODELS = {"seeds": "moonshotai/Kimi-K2.5", "llama": "meta-llama/Llama-3.1-8B-Instruct"}


@dataclass
class Row:
    profile: str
    point: CalibrationPoint
    model: float
    measured: float
    scale: float

    @property
    def target(self) -> float:
        value = self.point.tok_s if self.point.tok_s is not None else self.point.accept_length
        assert value is not None
        return value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_flags(profile: PerfProfile, point: CalibrationPoint) -> list[str]:
    """The sglang command line of the deployment this point was measured on."""
    model = next((m for key, m in MODELS.items() if profile.name.startswith(key)), "sim/model")
    flags = ["--model-path", model, "--tp", str(profile.gpu_count)]
    if point.spec is not None:
        s = point.spec
        flags += ["--speculative-algorithm", s.algorithm, "--speculative-draft-model-path"]
        flags += ["sim/eagle3", "--speculative-num-steps", str(s.num_steps)]
        flags += ["--speculative-eagle-topk", str(s.topk)]
        flags += ["--speculative-num-draft-tokens", str(s.num_draft_tokens)]
    if point.max_running_requests is not None:
        flags += ["--max-running-requests", str(point.max_running_requests)]
    return flags


def measure(
    profile: PerfProfile, point: CalibrationPoint, args: argparse.Namespace, workdir: Path
) -> Row:
    """Start a simulator for the point, load it with specsweep's loadgen, stop it."""
    expected = model_tok_s(profile, point)
    chunks_per_token = (
        1.0 if point.spec is None else 1 / expected_accept_length(profile, point.spec)
    )
    # Fast enough to finish soon, slow enough that wall-clock costs the model does not
    # know (an HTTP round trip between requests, ~2 ms) stay under 1% of a request.
    by_rate = expected * chunks_per_token / args.rate
    by_overhead = 0.4 * expected / (args.output_len * point.concurrency)
    scale = min(4.0, max(0.02, by_rate, by_overhead))
    port = free_port()
    env = {
        **os.environ,
        "SPECSWEEP_SIM_PROFILE": profile.name,
        "SPECSWEEP_SIM_TIME_SCALE": f"{scale:.4f}",
        "SPECSWEEP_SIM_LOAD_SECONDS": "0.2",
        "SPECSWEEP_SIM_WARMUP_SECONDS": "0.1",
        "SPECSWEEP_SIM_HEALTH_SECONDS": "0.01",
        "SPECSWEEP_SIM_GPU_STATE": str(workdir / "gpus"),
        "SPECSWEEP_SIM_SEED": "1",
    }
    argv = [sys.executable, "-m", "specsweep.sim.launch_server", *server_flags(profile, point)]
    argv += ["--port", str(port), "--log-level-http", "warning", "--decode-log-interval", "1000"]
    with (workdir / f"{profile.name}-{port}.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        concurrency = point.concurrency
        load = LoadSpec(
            concurrency=[concurrency],
            input_len=args.input_len,
            output_len=args.output_len,
            requests_per_stream=2,
            min_requests=8,
            seed=1,
        )
        result = run_level_sync(url, concurrency, load)
    finally:
        proc.terminate()
        proc.wait(10)
    m = result.metrics
    if point.tok_s is not None:
        return Row(profile.name, point, expected, m.output_throughput * scale, scale)
    assert point.spec is not None and m.accept_length is not None
    model = expected_accept_length(profile, point.spec)
    return Row(profile.name, point, model, m.accept_length, scale)


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"simulator exited with {proc.returncode}")
        try:
            if requests.get(url + "/ready", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    raise RuntimeError("simulator not ready in time")


def table(rows: list[Row], markdown: bool) -> str:
    head = ["profile", "point", "seeds / source", "model", "sim measured", "measured vs source"]
    body = []
    for r in rows:
        unit = " tok/s" if r.point.tok_s is not None else " tok/cycle"
        fmt = "{:.1f}" if r.point.tok_s is not None else "{:.2f}"
        body.append(
            [
                r.profile,
                r.point.label,
                fmt.format(r.target) + unit,
                fmt.format(r.model),
                fmt.format(r.measured),
                f"{(r.measured / r.target - 1) * 100:+.1f}%",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="append", help="profile name or file (repeatable)")
    parser.add_argument("--rate", type=float, default=4000.0, help="target streamed chunks/s")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    rows: list[Row] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sim-calibration-") as tmp:
        for name in args.profile or DEFAULT_PROFILES:
            profile = get_profile(name)
            for point in profile.calibration:
                row = measure(profile, point, args, Path(tmp))
                print(
                    f"{name}: {point.label}: {row.measured:.2f} (model {row.model:.2f}, "
                    f"source {row.target}) at time scale {row.scale:.3f}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(row)
    print(table(rows, args.markdown))
    print(f"\n{len(rows)} points in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
