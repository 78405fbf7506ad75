"""Simulation knobs, read from the environment so the command line stays sglang's own.

specsweep builds the exact ``python -m sglang.launch_server ...`` argv for every
variant; the simulator is started with the same argv (module name aside), so anything
that only the simulator understands must travel through environment variables:

``SPECSWEEP_SIM_TIME_SCALE`` (float, default 1.0)
    Multiplies every simulated GPU duration (prefill, decode steps, speculative
    cycles). 0.2 makes a demo five times faster; throughput numbers scale by 1/x.
``SPECSWEEP_SIM_LOAD_SECONDS`` (float, default 2.0)
    Wall-clock time from start to the HTTP port being bound (weights, KV cache,
    CUDA graphs). Not scaled. The port refuses connections meanwhile.
``SPECSWEEP_SIM_WARMUP_SECONDS`` (float, default 1.0)
    Wall-clock internal warmup after binding: ``/health`` answers 503. Not scaled.
``SPECSWEEP_SIM_HEALTH_SECONDS`` (float, default 0.05)
    Time one ``/health`` or ``/health_generate`` call takes (sglang runs a one-token
    generation, about a second on a real GPU). Not scaled.
``SPECSWEEP_SIM_CRASH`` (``load`` | ``warmup`` | ``serve``, default unset)
    Die in that phase with a realistic error in the log and exit status 1. ``load``
    dies before the port is ever bound.
``SPECSWEEP_SIM_CRASH_AFTER_S`` (float, default 0.2)
    Seconds into that phase before dying (a phase shorter than this dies at its end).
``SPECSWEEP_SIM_PROFILE`` (default ``default``)
    Performance profile name, see ``specsweep.sim.perf_model.PROFILES``.
``SPECSWEEP_SIM_SEED`` (int, default: ``--random-seed`` or 0)
    Seed of the acceptance sampling, so runs are reproducible.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

CRASH_PHASES = ("load", "warmup", "serve")

ENV_TIME_SCALE = "SPECSWEEP_SIM_TIME_SCALE"
ENV_LOAD_SECONDS = "SPECSWEEP_SIM_LOAD_SECONDS"
ENV_WARMUP_SECONDS = "SPECSWEEP_SIM_WARMUP_SECONDS"
ENV_HEALTH_SECONDS = "SPECSWEEP_SIM_HEALTH_SECONDS"
ENV_CRASH = "SPECSWEEP_SIM_CRASH"
ENV_CRASH_AFTER_S = "SPECSWEEP_SIM_CRASH_AFTER_S"
ENV_PROFILE = "SPECSWEEP_SIM_PROFILE"
ENV_SEED = "SPECSWEEP_SIM_SEED"

ALL_ENV_VARS = (
    ENV_TIME_SCALE,
    ENV_LOAD_SECONDS,
    ENV_WARMUP_SECONDS,
    ENV_HEALTH_SECONDS,
    ENV_CRASH,
    ENV_CRASH_AFTER_S,
    ENV_PROFILE,
    ENV_SEED,
)


@dataclass(frozen=True)
class SimKnobs:
    """Simulator settings that are not sglang flags (see the module docstring)."""

    time_scale: float = 1.0
    load_seconds: float = 2.0
    warmup_seconds: float = 1.0
    health_seconds: float = 0.05
    crash: str | None = None
    crash_after_s: float = 0.2
    profile: str = "default"
    seed: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SimKnobs:
        """Read the knobs; raise ValueError naming the variable on a bad value."""
        env = os.environ if env is None else env
        crash = (env.get(ENV_CRASH) or "").strip().lower() or None
        if crash is not None and crash not in CRASH_PHASES:
            raise ValueError(f"{ENV_CRASH} must be one of {CRASH_PHASES}, got {crash!r}")
        seed_raw = (env.get(ENV_SEED) or "").strip()
        knobs = cls(
            time_scale=_float(env, ENV_TIME_SCALE, cls.time_scale),
            load_seconds=_float(env, ENV_LOAD_SECONDS, cls.load_seconds),
            warmup_seconds=_float(env, ENV_WARMUP_SECONDS, cls.warmup_seconds),
            health_seconds=_float(env, ENV_HEALTH_SECONDS, cls.health_seconds),
            crash=crash,
            crash_after_s=_float(env, ENV_CRASH_AFTER_S, cls.crash_after_s),
            profile=(env.get(ENV_PROFILE) or "").strip() or cls.profile,
            seed=int(seed_raw) if seed_raw else None,
        )
        if knobs.time_scale <= 0:
            raise ValueError(f"{ENV_TIME_SCALE} must be > 0, got {knobs.time_scale}")
        return knobs

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces these knobs (for launchers and tests)."""
        env = {
            ENV_TIME_SCALE: repr(self.time_scale),
            ENV_LOAD_SECONDS: repr(self.load_seconds),
            ENV_WARMUP_SECONDS: repr(self.warmup_seconds),
            ENV_HEALTH_SECONDS: repr(self.health_seconds),
            ENV_CRASH_AFTER_S: repr(self.crash_after_s),
            ENV_PROFILE: self.profile,
        }
        if self.crash:
            env[ENV_CRASH] = self.crash
        if self.seed is not None:
            env[ENV_SEED] = str(self.seed)
        return env


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {raw!r}")
    return value
