"""Simulation knobs, read from the environment so the command line stays sglang's own.

specsweep builds the exact ``python -m sglang.launch_server ...`` argv for every
variant; the simulator is started with the same argv (module name aside), so anything
that only the simulator understands travels through environment variables.

Time and profile
``SPECSWEEP_SIM_PROFILE`` (default ``default``)
    A bundled profile name (``specsweep/sim/profiles/*.yaml``) or a path to a profile
    file: step-time model, acceptance, limits, GPUs, startup times.
``SPECSWEEP_SIM_TIME_SCALE`` (float > 0, default 1.0)
    Multiplies every simulated GPU duration (prefill, decode steps, speculative cycles)
    and the profile's startup and /health times. 0.2 runs five times faster;
    throughputs then read 1/0.2 = 5x higher (multiply by the scale to convert back).
``SPECSWEEP_SIM_GPU_SPEED`` (float > 0, default 1.0)
    How fast this host's GPU runs relative to the profile's: every prefill and decode
    step takes 1/speed as long (startup times are unchanged). 0.9 is a host 10% slower
    than its identical-looking peers (clocks, PCIe, NUMA): how a fleet's calibration is
    tested. Unlike the time scale it is a property of the host, not of the config: set it
    in the environment of the host's worker.
``SPECSWEEP_SIM_LOAD_SECONDS`` / ``SPECSWEEP_SIM_WARMUP_SECONDS`` (float)
    Wall-clock time from start to the port being bound (weights, KV cache, CUDA
    graphs), and of the internal warmup after it (/health answers 503). When set, taken
    as is (not scaled); unset, the profile's times x the time scale.
``SPECSWEEP_SIM_HEALTH_SECONDS`` (float)
    Time one /health or /health_generate call takes (sglang runs a one-token
    generation: about a second). Set: as is; unset: the profile's (1 s) x time scale.
``SPECSWEEP_SIM_SEED`` (int, default: ``--random-seed`` or 0)
    Seed of acceptance sampling and random faults, so runs are reproducible.
``SPECSWEEP_SIM_SGLANG_VERSION`` (a version such as ``0.5.9``, ``0.5.23``, ``0.5.11rc1``;
    default ``0.5.23``)
    The sglang release the simulator behaves as (``specsweep.sim.version``):
    ``/server_info`` reports ``<version>-sim``; below 0.5.11 ``--speculative-adaptive``
    and ``--speculative-adaptive-config`` are unknown flags (usage, exit 2); from 0.5.11
    to 0.5.22 adaptive speculation falls back to static params under the overlap
    scheduler (``SGLANG_ENABLE_SPEC_V2`` true); 0.5.23 runs it there too.

Faults (each reproduces something a real GPU host does)
``SPECSWEEP_SIM_CRASH`` (``load`` | ``warmup`` | ``serve``) and ``..._CRASH_AFTER_S``
    (float, default 0.2): die that many seconds into the phase the way sglang dies
    (CUDA OOM traceback in a scheduler during load, a warmup error, a scheduler
    exception while serving), the launcher killing its process tree and itself
    (exit by SIGKILL). ``load`` never binds the port.
``SPECSWEEP_SIM_CRASH_AFTER_REQUESTS`` (int N)
    Die (as ``serve``) right after the N-th generation request completes.
``SPECSWEEP_SIM_HANG`` (``load`` | ``warmup``)
    Stop making progress in that phase but stay alive: ``load`` never binds the port,
    ``warmup`` answers /health 503 forever. SIGTERM still stops it.
``SPECSWEEP_SIM_SLOW_HEALTH_S`` (float)
    Each /health and /health_generate takes this many wall seconds (a busy or wedged
    server); overrides HEALTH_SECONDS.
``SPECSWEEP_SIM_HEALTH_FLAP`` (int N >= 1)
    After ready, /health answers N times 200, then N times 503, and so on.
``SPECSWEEP_SIM_ERROR_EVERY`` (int K) / ``SPECSWEEP_SIM_ERROR_RATE`` (0..1)
    Every K-th generation request, or that seeded fraction of them, fails with
    ``SPECSWEEP_SIM_ERROR_STATUS`` (500 or 503, default 500) and sglang's error JSON.
``SPECSWEEP_SIM_DROP_EVERY`` (int K)
    Every K-th streamed generation is cut after its first chunk: the connection closes
    with no final chunk and no ``[DONE]`` (a worker or proxy dying mid-stream).
``SPECSWEEP_SIM_NO_CONTINUOUS_USAGE`` (bool)
    The OpenAI endpoints ignore ``stream_options.continuous_usage_stats`` (as servers
    other than sglang 0.5.23 do): chunks carry ``usage: null``, only the final usage
    chunk counts the tokens, and a speculative chunk holds several uncounted tokens.
``SPECSWEEP_SIM_PORT_IN_USE`` (bool)
    Binding the HTTP port fails as if another process held it (uvicorn's
    ``[Errno 98] ... address already in use``, exit status 3), as a real conflict does.
``SPECSWEEP_SIM_ORPHAN`` (``1``/``scheduler`` | ``all``)
    The TP0 scheduler (or every scheduler) survives its launcher: own session, SIGTERM
    ignored, no parent-death signal; it is reparented to init and keeps its GPU memory
    until SIGKILLed, like the orphans sglang users report.

Simulated GPUs (``specsweep.sim.gpu_inventory``, ``python -m specsweep.sim.nvidia_smi``)
``SPECSWEEP_SIM_GPU_STATE`` (path, default ``<tmp>/specsweep-sim-gpus-<uid>``)
    State directory of the simulated GPU inventory and per-process allocations.
``SPECSWEEP_SIM_GPU_RELEASE_S`` (float, default 0.3)
    A killed process's GPU memory stays charged this long (real drivers: ~0.3 s).
``SPECSWEEP_SIM_GPU_HIDE_PIDS`` (bool; read by the nvidia-smi stand-in)
    Container mode: ``--query-compute-apps`` lists nothing while memory.used counts.
``SPECSWEEP_SIM_GPU_CHECK_MEMORY`` (bool)
    Loading fails with a CUDA OOM when the GPUs lack the free memory (e.g. an orphan
    holds it), as sglang does. Off by default so concurrent simulators never collide.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

CRASH_PHASES = ("load", "warmup", "serve")
HANG_PHASES = ("load", "warmup")
ORPHAN_MODES = ("scheduler", "all")
ERROR_STATUSES = (500, 503)

ENV_PROFILE = "SPECSWEEP_SIM_PROFILE"
ENV_TIME_SCALE = "SPECSWEEP_SIM_TIME_SCALE"
ENV_GPU_SPEED = "SPECSWEEP_SIM_GPU_SPEED"
ENV_LOAD_SECONDS = "SPECSWEEP_SIM_LOAD_SECONDS"
ENV_WARMUP_SECONDS = "SPECSWEEP_SIM_WARMUP_SECONDS"
ENV_HEALTH_SECONDS = "SPECSWEEP_SIM_HEALTH_SECONDS"
ENV_SEED = "SPECSWEEP_SIM_SEED"
ENV_SGLANG_VERSION = "SPECSWEEP_SIM_SGLANG_VERSION"
ENV_CRASH = "SPECSWEEP_SIM_CRASH"
ENV_CRASH_AFTER_S = "SPECSWEEP_SIM_CRASH_AFTER_S"
ENV_CRASH_AFTER_REQUESTS = "SPECSWEEP_SIM_CRASH_AFTER_REQUESTS"
ENV_HANG = "SPECSWEEP_SIM_HANG"
ENV_SLOW_HEALTH_S = "SPECSWEEP_SIM_SLOW_HEALTH_S"
ENV_HEALTH_FLAP = "SPECSWEEP_SIM_HEALTH_FLAP"
ENV_ERROR_EVERY = "SPECSWEEP_SIM_ERROR_EVERY"
ENV_DROP_EVERY = "SPECSWEEP_SIM_DROP_EVERY"
ENV_ERROR_RATE = "SPECSWEEP_SIM_ERROR_RATE"
ENV_ERROR_STATUS = "SPECSWEEP_SIM_ERROR_STATUS"
ENV_PORT_IN_USE = "SPECSWEEP_SIM_PORT_IN_USE"
ENV_NO_CONTINUOUS_USAGE = "SPECSWEEP_SIM_NO_CONTINUOUS_USAGE"
ENV_ORPHAN = "SPECSWEEP_SIM_ORPHAN"
ENV_GPU_STATE = "SPECSWEEP_SIM_GPU_STATE"
ENV_GPU_RELEASE_S = "SPECSWEEP_SIM_GPU_RELEASE_S"
ENV_GPU_HIDE_PIDS = "SPECSWEEP_SIM_GPU_HIDE_PIDS"
ENV_GPU_CHECK_MEMORY = "SPECSWEEP_SIM_GPU_CHECK_MEMORY"

DEFAULT_SGLANG_VERSION = "0.5.23"
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:(?:a|b|rc)\d+|\.post\d+|\.dev\d+)*$")

ALL_ENV_VARS = tuple(v for k, v in sorted(globals().items()) if k.startswith("ENV_"))


@dataclass(frozen=True)
class SimKnobs:
    """Simulator settings that are not sglang flags (see the module docstring)."""

    time_scale: float = 1.0
    gpu_speed: float = 1.0
    load_seconds: float | None = None
    warmup_seconds: float | None = None
    health_seconds: float | None = None
    crash: str | None = None
    crash_after_s: float = 0.2
    crash_after_requests: int | None = None
    hang: str | None = None
    slow_health_s: float | None = None
    health_flap: int = 0
    error_every: int = 0
    error_rate: float = 0.0
    error_status: int = 500
    drop_every: int = 0
    port_in_use: bool = False
    no_continuous_usage: bool = False
    orphan: str | None = None
    gpu_state: str | None = None
    gpu_release_s: float = 0.3
    gpu_check_memory: bool = False
    profile: str = "default"
    seed: int | None = None
    sglang_version: str = DEFAULT_SGLANG_VERSION

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SimKnobs:
        """Read the knobs; raise ValueError naming the variable on a bad value."""
        env = os.environ if env is None else env
        crash = _choice(env, ENV_CRASH, CRASH_PHASES)
        after_requests = _int(env, ENV_CRASH_AFTER_REQUESTS)
        if after_requests is not None and crash not in (None, "serve"):
            raise ValueError(f"{ENV_CRASH_AFTER_REQUESTS} needs {ENV_CRASH} unset or 'serve'")
        orphan = (env.get(ENV_ORPHAN) or "").strip().lower() or None
        if orphan in ("1", "true", "yes", "tp0"):
            orphan = "scheduler"
        if orphan in ("0", "false", "no"):
            orphan = None
        if orphan is not None and orphan not in ORPHAN_MODES:
            raise ValueError(f"{ENV_ORPHAN} must be 1, scheduler or all, got {orphan!r}")
        status = _int(env, ENV_ERROR_STATUS) or 500
        if status not in ERROR_STATUSES:
            raise ValueError(f"{ENV_ERROR_STATUS} must be one of {ERROR_STATUSES}, got {status}")
        scale = _float(env, ENV_TIME_SCALE)
        if scale == 0:
            raise ValueError(f"{ENV_TIME_SCALE} must be > 0, got 0")
        speed = _float(env, ENV_GPU_SPEED)
        if speed is not None and speed <= 0:
            raise ValueError(f"{ENV_GPU_SPEED} must be > 0, got {speed}")
        knobs = cls(
            time_scale=_or(scale, 1.0),
            gpu_speed=_or(speed, 1.0),
            load_seconds=_float(env, ENV_LOAD_SECONDS),
            warmup_seconds=_float(env, ENV_WARMUP_SECONDS),
            health_seconds=_float(env, ENV_HEALTH_SECONDS),
            crash="serve" if crash is None and after_requests is not None else crash,
            crash_after_s=_or(_float(env, ENV_CRASH_AFTER_S), cls.crash_after_s),
            crash_after_requests=after_requests,
            hang=_choice(env, ENV_HANG, HANG_PHASES),
            slow_health_s=_float(env, ENV_SLOW_HEALTH_S),
            health_flap=_int(env, ENV_HEALTH_FLAP) or 0,
            error_every=_int(env, ENV_ERROR_EVERY) or 0,
            error_rate=_or(_float(env, ENV_ERROR_RATE), 0.0),
            error_status=status,
            drop_every=_int(env, ENV_DROP_EVERY) or 0,
            port_in_use=env_bool(env, ENV_PORT_IN_USE),
            no_continuous_usage=env_bool(env, ENV_NO_CONTINUOUS_USAGE),
            orphan=orphan,
            gpu_state=(env.get(ENV_GPU_STATE) or "").strip() or None,
            gpu_release_s=_or(_float(env, ENV_GPU_RELEASE_S), cls.gpu_release_s),
            gpu_check_memory=env_bool(env, ENV_GPU_CHECK_MEMORY),
            profile=(env.get(ENV_PROFILE) or "").strip() or cls.profile,
            seed=_int(env, ENV_SEED, allow_negative=True),
            sglang_version=sglang_version(env),
        )
        if knobs.error_rate > 1:
            raise ValueError(f"{ENV_ERROR_RATE} must lie in [0, 1], got {knobs.error_rate}")
        return knobs

    def durations(self, load: float, warmup: float, health: float) -> tuple[float, float, float]:
        """Wall seconds of (load, warmup, one /health) given the profile's unscaled times."""
        s = self.time_scale
        return (
            _or(self.load_seconds, load * s),
            _or(self.warmup_seconds, warmup * s),
            _or(self.slow_health_s, _or(self.health_seconds, health * s)),
        )


def parse_sglang_version(text: str, name: str = ENV_SGLANG_VERSION) -> tuple[int, int, int]:
    """``0.5.23`` -> (0, 5, 23) (pre-releases as their release); ValueError naming ``name``."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise ValueError(
            f"{name} must be an sglang version such as 0.5.9, 0.5.23 or 0.5.11rc1, got {text!r}"
        )
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def sglang_version(env: Mapping[str, str]) -> str:
    """The release ``SPECSWEEP_SIM_SGLANG_VERSION`` selects (default 0.5.23); ValueError."""
    raw = (env.get(ENV_SGLANG_VERSION) or "").strip()
    if not raw:
        return DEFAULT_SGLANG_VERSION
    parse_sglang_version(raw)
    return raw


def env_bool(env: Mapping[str, str], name: str) -> bool:
    """true/1/yes (any case) -> True; anything else False."""
    return (env.get(name) or "").strip().lower() in ("1", "true", "yes", "y", "on")


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    value = (env.get(name) or "").strip().lower() or None
    if value is not None and value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def _float(env: Mapping[str, str], name: str) -> float | None:
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {raw!r}")
    return value


def _int(env: Mapping[str, str], name: str, allow_negative: bool = False) -> int | None:
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < 0 and not allow_negative:
        raise ValueError(f"{name} must be >= 0, got {raw!r}")
    return value
