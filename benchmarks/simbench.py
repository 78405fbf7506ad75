"""What the simulator benchmarks share (adaptive_policy.py, search_savings.py,
interval_coverage.py): progress on stderr, a loopback port, the weak-drafter profile, where a
case's profile comes from, the time scale, one sweep in this process, the commit measured."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

import yaml

# `extends: default` with a draft head trained on another distribution.
WEAK_DRAFTER: dict[str, Any] = {
    "name": "weak-drafter",
    "extends": "default",
    "description": "default's timing with a weak drafter (acceptance.p 0.30)",
    "assumptions": "As default, except that the draft head accepts 30% of first "
    "draft tokens (decay 0.85 per depth, as default).",
    "acceptance": {"p": 0.30},
}


class ProfileCase(Protocol):
    key: str
    profile: str | None  # a bundled profile name
    file: dict[str, Any] | None  # or a profile file written to --out


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile_ref(case: ProfileCase, out: Path) -> str:
    """SPECSWEEP_SIM_PROFILE for the case: a bundled name, or the file written to out."""
    if case.file is None:
        assert case.profile is not None
        return case.profile
    path = out / "profiles" / f"{case.key}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(case.file, sort_keys=False))
    return str(path)


def time_scale(ref: str, levels: list[int], args: Any, mrr: int = 64) -> float:
    """As fast as the machine allows: a baseline decode step at c=1 lasts at least
    --min-step-ms of wall time (the event loop's and the client's own costs stay small
    beside it), and the baseline at the top level streams at most --rate chunks per wall
    second (one chunk per --stream-interval steps per request)."""
    from specsweep.sim.perf_model import baseline_step_ms, steady_state_throughput
    from specsweep.sim.profiles import get_profile

    if args.time_scale:
        return args.time_scale
    profile = get_profile(ref)
    top = steady_state_throughput(profile, max(levels), None, mrr) / args.stream_interval
    scale = max(top / args.rate, args.min_step_ms / baseline_step_ms(profile, 1))
    return math.ceil(float(f"{scale:.3g}") * 100) / 100


PACED_RATE = 10_000.0  # the most chunks per wall second the top level's baseline may stream
PACED_MIN_SCALE = 0.1  # time never runs faster


def paced_scale(
    profile: str, levels: list[int], mrr: int = 64, min_scale: float = PACED_MIN_SCALE
) -> float:
    """The profile's time scale for a sweep of these levels: 0.1, or slower where the
    baseline at the top level would stream more than PACED_RATE chunks per wall second (one
    per token): past that the shared CPU, not the model, sets the throughput (a
    llama-3.1-8b-eagle3-h200 run at 0.1 measured its baseline at c=32 at 80% of the
    model's, and at 35% on a loaded box; its drift calibration at c=32 read 21%);
    never faster than `min_scale`."""
    from types import SimpleNamespace

    args = SimpleNamespace(time_scale=None, stream_interval=1, rate=PACED_RATE, min_step_ms=0.0)
    return max(min_scale, time_scale(profile, levels, args, mrr))


def sim_server(profile: str, mrr: int = 64, scale: float = 0.1) -> dict[str, Any]:
    """The `server` section of a benchmark's sweep on the simulator: a loopback port, one
    max_running_requests for every variant, the time scale and short load and warmup."""
    return {
        "backend": "simulator",
        "model_path": "sim/llama",
        "host": "127.0.0.1",
        "port": free_port(),
        "max_running_requests": mrr,
        "startup_timeout_s": 60,
        "env": {
            "SPECSWEEP_SIM_PROFILE": profile,
            "SPECSWEEP_SIM_TIME_SCALE": f"{scale:g}",
            "SPECSWEEP_SIM_LOAD_SECONDS": "0.5",
            "SPECSWEEP_SIM_WARMUP_SECONDS": "0.2",
        },
    }


def prefect_here(out: Path) -> None:
    """Prefect's ephemeral API under `out` (unless PREFECT_API_URL names one), quiet, its
    database migrated before the server's startup wait."""
    import os

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    if not os.environ.get("PREFECT_API_URL"):
        os.environ.setdefault("PREFECT_HOME", str(out / "prefect"))
    from specsweep.flows.prefect_api import prepare_ephemeral_api

    prepare_ephemeral_api()


def run_sweep(config: Any) -> tuple[str | None, str | None]:
    """(run id, failure) of one matrix sweep in this process."""
    from specsweep.errors import SweepFailed
    from specsweep.flows.matrix_sweep import matrix_sweep
    from specsweep.flows.target_lock import ensure_target_limit, target_lock_name

    ensure_target_limit(target_lock_name(config))
    try:
        return matrix_sweep(config)["run_id"], None
    except SweepFailed as exc:
        return exc.run_id, str(exc)


def code_state(root: Path, paths: tuple[str, ...] = ("specsweep", "flows", "tasks")) -> str:
    """The commit measured, and whether the code under test had uncommitted changes."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True)
        return done.stdout.rstrip()  # not strip: porcelain lines start with a space

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = git("status", "--porcelain", "--", *paths).splitlines()
    if not dirty:
        return f"specsweep at {head}"
    return f"specsweep at {head} plus uncommitted changes to " + ", ".join(
        line[3:] for line in dirty
    )
