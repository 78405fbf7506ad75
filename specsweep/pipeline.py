"""One variant's server life on a target, as one object with explicit states.

``VariantServer`` is built once per variant from the sweep's config (its host,
its exact command, the results store, the run's identity) and walks the five
steps in order::

    NEW --kill_stale--> CLEANED --launch--> LAUNCHED --wait_for_health--> READY
     ^                     ^                   |                            |
     |                     +---- kill_stale ---+-- teardown --> STOPPED <---+
     +-- benchmark_level only in READY; leaving the ``with`` block tears down

A launch always follows a kill-stale step, levels run only on a ready server,
and the context manager's exit stops whatever was started: on success,
failure and cancellation alike. Misuse (a level before the server is ready)
fails loudly. ``tasks/`` wraps each step as a Prefect task; the flow only
decides the order, the retries and the lock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from types import TracebackType
from typing import Any

from specsweep import progress
from specsweep.analysis.levels import answer_rows
from specsweep.analysis.sequential import DecideStep, MeasureMore, Settled, plan_more
from specsweep.config import LoadSpec, SearchSpec, ServerSpec, SweepConfig, Target, Variant
from specsweep.config.command import LaunchCommand, command_for
from specsweep.config.load import Shape
from specsweep.config.secrets import resolve_env
from specsweep.config.versions import SglangVersion, check_version, needs_version_check
from specsweep.errors import ServerDiedError, VariantMisconfigured
from specsweep.loadgen.calibration import DriftBands, DriftCalibration, calibration_levels
from specsweep.loadgen.metrics import compute_level_metrics
from specsweep.loadgen.runner import LevelResult
from specsweep.results.drift import Drift
from specsweep.results.phases import Phases, carried_over
from specsweep.results.rows import RunContext, level_row, request_rows, skipped_level_row
from specsweep.results.store import ResultsStore
from specsweep.search.pruning import skip_reason
from specsweep.targets import host_for
from specsweep.targets.adaptive_trace import AdaptiveTrace, adaptive_initialized, fallback_reason
from specsweep.targets.cleanup import CleanupReport
from specsweep.targets.handle import ServerHandle
from specsweep.targets.health import Readiness, ReadyReport
from specsweep.targets.host import Host
from specsweep.targets.log_cause import describe_cause
from specsweep.targets.server_facts import ServerFacts
from specsweep.targets.teardown import TeardownReport

log = logging.getLogger(__name__)
# a measure-more pass's prompt seed stride: no level or calibration of the run sends them
_MORE_SEED = 15_485_863
EXIT_GRACE_S = 1.0  # how long a crashed server may take to exit (ensure_alive)

ReadyProgress = Callable[[Readiness, str], None]
LevelProgress = Callable[[int, int], None]


class ServerState(StrEnum):
    NEW = "new"  # nothing done yet
    CLEANED = "cleaned"  # stale servers of ours are gone, the GPUs' memory is back
    LAUNCHED = "launched"  # the process runs; not known to serve yet
    READY = "ready"  # it generated a token: levels may run
    STOPPED = "stopped"  # torn down; a relaunch starts again at kill_stale


def kill_stale_servers(config: SweepConfig, *, force: bool = False) -> CleanupReport:
    """Stop leftovers of ours on the config's target, port and GPUs.

    For the cancellation hooks and a fleet host's recovery, which hold only the
    config: the server they must stop was started by a process that is gone.
    """
    return _kill_stale(host_for(config.target), config.server, config.target, force)


def _kill_stale(host: Host, server: ServerSpec, target: Target, force: bool) -> CleanupReport:
    return host.kill_stale(
        server.port,
        server.env,
        force=force,
        tolerate_foreign_gpu=target.tolerate_foreign_gpu,
        grace_s=server.stop_grace_s,
    )


def check_target_version(config: SweepConfig, variants: list[Variant]) -> SglangVersion | None:
    """Before the first launch: the target's sglang version (the config's
    server.sglang_version when stated, else asked of the target), and UnsupportedByVersion
    when it lacks a flag the variants (or the policy verification) need. None (nothing
    asked) when no variant needs a versioned flag, so plain sweeps start exactly as before."""
    verify = config.verify_policy is not None
    if not needs_version_check(variants, verify):
        return None
    stated = config.server.sglang_version
    version = (
        SglangVersion(stated, "config")
        if stated is not None
        else host_for(config.target).sglang_version(config.server)
    )
    where = f"target {config.target.name}"
    if version.source not in ("metadata", "simulator"):  # a stated or source-tree version
        where += f" (version from {'server.sglang_version' if stated else version.source})"
    check_version(variants, version.text, where, verify)
    return version


class VariantServer:
    """A variant's server on its target, from the kill-stale step to the teardown."""

    def __init__(
        self,
        host: Host,
        target: Target,
        server: ServerSpec,
        load: LoadSpec,
        variant: Variant,
        command: LaunchCommand,
        store: ResultsStore,
        ctx: RunContext,
    ) -> None:
        self.host = host
        self.target = target
        self.server = server
        self.load = load
        self.variant = variant
        self.command = command
        self.store = store
        self.ctx = ctx
        self.state = ServerState.NEW
        self.handle: ServerHandle | None = None
        self.facts: ServerFacts | None = None
        self.cleanup: CleanupReport | None = None  # the latest kill-stale step's report
        self.first_cleanup: CleanupReport | None = None  # the GPUs as this variant found them
        self.last_teardown: TeardownReport | None = None
        self.phases = Phases()
        self._held: dict[str, float] = {}
        self.trace: AdaptiveTrace | None = None  # an adaptive server's step counts, from its log
        self._log_offset = 0
        # each cell measured on this launch: its records, pooled with any extra passes
        self._measured: dict[tuple[str, int], LevelResult] = {}
        stored = store.read_drift(ctx.run_id, ctx.target)
        # this run's drift on this target, once measured (by whichever server came first)
        self.calibration = DriftBands.from_json(stored) if stored is not None else None

    @classmethod
    def for_variant(cls, config: SweepConfig, variant: Variant, ctx: RunContext) -> VariantServer:
        """Everything a variant's life needs, derived once from the sweep's config.

        A variant with an adaptive tiers file names it by the target's resolved workdir
        (an SSH host's is asked once), so the server finds it whatever its cwd."""
        host = host_for(config.target)
        needs_file = variant.adaptive is not None and variant.adaptive.file_name() is not None
        return cls(
            host,
            config.target,
            config.server,
            config.load,
            variant,
            command_for(config, variant, host.workdir() if needs_file else None),
            ResultsStore(config.results_dir),
            ctx,
        )

    @property
    def label(self) -> str:
        return self.variant.label

    def __repr__(self) -> str:
        return f"VariantServer({self.label}@{self.ctx.target}, {self.state})"

    # --- resume --------------------------------------------------------------------
    def cells(self) -> list[tuple[Shape, int]]:
        """Every (shape, concurrency) this variant measures, shape by shape."""
        return [(s, c) for s in self.load.shape_list() for c in self.load.concurrency]

    def _shape_key(self, shape: Shape) -> str | None:
        """The shape in file names: only a run of several shapes names it."""
        return shape.label if self.load.multi_shape else None

    def cell_name(self, shape: Shape | None, concurrency: int) -> str:
        if shape is None or not self.load.multi_shape:
            return f"c={concurrency}"
        return f"{shape.label} c={concurrency}"

    def levels_to_measure(self) -> list[tuple[Shape, int]]:
        """The cells (shape, concurrency) of this run not yet written on this target."""
        run, target = self.ctx.run_id, self.ctx.target
        return [
            (s, c)
            for s, c in self.cells()
            if not self.store.has_level(run, self.label, c, target, self._shape_key(s))
        ]

    # --- the target's hold: when this variant's server owned the GPUs --------------
    def __enter__(self) -> VariantServer:
        """Record when the hold began before anything starts: a host lost mid-variant
        still leaves when its server began. A relaunch in the same run (a retry, a resumed
        search) adds to the earlier launches' record (results/phases.py), so the run's
        server time and a search's budget count every launch."""
        earlier = self.store.read_phase_record(self.ctx.run_id, self.label, self.ctx.target)
        seconds, held = carried_over(earlier)
        for name, value in seconds.items():
            self.phases.seconds[name] = round(self.phases.seconds.get(name, 0.0) + value, 3)
        self._held = held | {"held_from_unix": time.time()}
        self._write_phases()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.teardown()
        finally:
            self._held["held_until_unix"] = time.time()
            self._write_phases()

    def _alive(self) -> None:
        """After each level: its seconds, and the hold's last sign of life should its
        process be killed (results/phases.py). Nothing before the hold began (__enter__)."""
        if self._held:
            self._held["alive_unix"] = time.time()
            self._write_phases()

    def _write_phases(self) -> None:
        memory: dict[str, float] = {}
        if self.first_cleanup is not None and self.first_cleanup.gpu_checked:
            memory["gpu_mib_at_start"] = float(sum(self.first_cleanup.memory_before.values()))
        if self.last_teardown is not None and self.last_teardown.gpu_checked:
            memory["gpu_mib_after_teardown"] = float(sum(self.last_teardown.memory_after.values()))
        self.store.write_phases(
            self.ctx.run_id,
            self.label,
            self.ctx.target,
            self.phases.seconds | memory | self._held,
        )

    # --- the five steps ------------------------------------------------------------
    def _require(self, step: str, *allowed: ServerState) -> None:
        if self.state not in allowed:
            raise RuntimeError(
                f"{self.label}: {step} needs the server {' or '.join(allowed)}, "
                f"but it is {self.state}"
            )

    def kill_stale(self, *, force: bool = False) -> CleanupReport:
        """Stop leftovers of ours on the port and GPUs (CUDA_VISIBLE_DEVICES, else all)."""
        self._require("kill-stale", ServerState.NEW, ServerState.CLEANED, ServerState.STOPPED)
        with self.phases.timed("kill_stale_s"):
            report = _kill_stale(self.host, self.server, self.target, force)
        self.cleanup = report
        self.first_cleanup = self.first_cleanup or report
        self.state = ServerState.CLEANED
        return report

    def launch(self) -> ServerHandle:
        """Start the server detached; secret references are resolved for it alone."""
        self._require("launch", ServerState.CLEANED)
        with self.phases.timed("launch_to_ready_s"):
            log_path = self.host.log_path(self.ctx.run_id, self.label)
            self._write_adaptive_config()
            with_values = LaunchCommand(self.command.argv, resolve_env(self.command.env))
            self.handle = self.host.start(with_values, log_path, self.server.port)
        self.state = ServerState.LAUNCHED
        log.info(
            "launched %s: pid %d, log %s\n  %s",
            self.label, self.handle.pid, log_path, self.command.shell(),
        )  # fmt: skip
        return self.handle

    def wait_for_health(self, on_progress: ReadyProgress | None = None) -> ReadyReport:
        """Until the server generates a token; raises at once when it dies."""
        self._require("wait-for-health", ServerState.LAUNCHED)
        assert self.handle is not None
        with self.phases.timed("launch_to_ready_s"):
            report = self.host.wait_ready(self.handle, self.server, on_progress)
            self.facts = self.host.facts(self.server)
            self._start_trace()
        self.state = ServerState.READY
        return report

    # --- adaptive speculation ------------------------------------------------------
    def _write_adaptive_config(self) -> None:
        """The variant's tiers file, where its command line says (on the target)."""
        spec = self.variant.adaptive
        config = spec.sglang_config() if spec is not None else None
        if config is None:
            return
        argv = list(self.command.argv)
        path = argv[argv.index("--speculative-adaptive-config") + 1]
        self.host.write_file(path, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode())

    def _read_log(self) -> str:
        assert self.handle is not None
        text, self._log_offset = self.host.read_log(self.handle, self._log_offset)
        return text

    def _start_trace(self) -> None:
        """An adaptive variant: fail when sglang fell back to static params, else follow
        its step counts from the log (see targets/adaptive_trace.py)."""
        if not self.variant.is_adaptive:
            return
        self._log_offset = 0
        startup = self._read_log()
        reason = fallback_reason(startup)
        if reason is not None:
            raise VariantMisconfigured(
                f"{self.label}: sglang disabled adaptive speculation ({reason}) and runs "
                "static params; not measured under an adaptive name. Fix the variant (EAGLE/"
                "EAGLE3, topk 1; see the log) or remove adaptive"
            )
        steps = self.variant.resolved_num_steps
        assert steps is not None
        self.trace = AdaptiveTrace(steps)
        self.trace.skip(startup)
        if not adaptive_initialized(startup):
            log.warning(
                "%s: the server log has no 'AdaptiveSpeculativeParams initialized' line (log "
                "level above info?): the level rows will not say which step counts ran",
                self.label,
            )

    # --- the drift calibration ----------------------------------------------------
    @property
    def needs_calibration(self) -> bool:
        """The load asks for the drift and this run has not measured it on this target at
        every concurrency its levels need (a fleet host's calibration run measured level 1
        alone: its full baseline then adds c=4 and the top level)."""
        return self.load.calibrate_drift and bool(self._missing_bands())

    def _missing_bands(self) -> list[tuple[int, LoadSpec]]:
        have = {p.concurrency for p in self.calibration.points} if self.calibration else set()
        return [(c, load) for c, load in calibration_levels(self.load) if c not in have]

    def calibrate_drift(self, on_progress: LevelProgress | None = None) -> DriftBands | None:
        """Measure this run's drift on the target (loadgen/calibration.py: at c=4 and, for
        a wide range, at the top level) and store it for every later level; None (and a
        warning: the levels fall back to the assumed floor) when every calibration level
        failed. One that failed beside one that worked leaves the levels on the other; one
        already stored for this run and target is not measured again."""
        self._require("calibrate-drift", ServerState.READY)
        measured = list(self.calibration.points) if self.calibration is not None else []
        new = [
            one
            for concurrency, load in self._missing_bands()
            if (one := self._calibrate_at(concurrency, load, on_progress)) is not None
        ]
        if not new:
            return None
        bands = DriftBands((*measured, *new))
        self.store.write_drift(self.ctx.run_id, self.ctx.target, bands.to_json())
        self.calibration = bands
        return bands

    def drift_at(self, concurrency: int) -> Drift | None:
        """The run's measured drift for a level at this concurrency; None before any."""
        return self.calibration.drift_at(concurrency) if self.calibration is not None else None

    def _calibrate_at(
        self, concurrency: int, load: LoadSpec, on_progress: LevelProgress | None
    ) -> DriftCalibration | None:
        log.info(
            "%s: measuring the run's drift: %d passes of %d requests at c=%d",
            self.label, load.repeats, load.num_requests(concurrency), concurrency,
        )  # fmt: skip
        calibration, why = None, "fewer than two passes"
        try:
            with self.phases.timed("calibration_s"):
                result = self.host.run_level(self.server, concurrency, load, on_progress)
        except Exception as exc:  # optional: the levels still run, on the assumed floor
            why = f"{type(exc).__name__}: {exc}"
        else:
            if result.metrics.status == "ok":
                calibration = DriftCalibration.from_result(
                    result, self.label, load.shape.label, load.num_requests(concurrency)
                )
            why = result.metrics.error or why
        if calibration is None:
            log.warning(
                "%s: the drift calibration at c=%d failed (%s); the levels use the run's other "
                "calibrations, or assume a drift of +-1.5%% until one succeeds",
                self.label, concurrency, why,
            )  # fmt: skip
            return None
        log.info(
            "%s: drift %.2f%% at c=%d (passes' CV %.2f%%, yield %.2f%%; %d passes)",
            self.label, 100 * calibration.drift, concurrency, 100 * calibration.between_cv,
            100 * calibration.yield_cv, calibration.df + 1,
        )  # fmt: skip
        return calibration

    def benchmark_level(
        self,
        concurrency: int,
        on_progress: LevelProgress | None = None,
        shape: Shape | None = None,
    ) -> dict[str, Any]:
        """Run one level (a cell: `shape` at `concurrency`, default the first shape) and
        write it at once, so a later crash loses nothing measured.

        The per-request file is written first: a level file is the mark of a level
        done, and resume skips exactly those.
        """
        self._require("benchmark-level", ServerState.READY)
        assert self.facts is not None
        shape = shape or self.load.shape
        load = self.load.for_shape(shape)
        who = self.label if not self.load.multi_shape else f"{self.label} {shape.label}"
        report = progress.reporter(who, concurrency)

        def both(done: int, total: int) -> None:
            report(done, total)
            if on_progress is not None:
                on_progress(done, total)

        with self.phases.timed("benchmark_s"):
            both(0, load.num_requests(concurrency))  # the bar appears when it starts
            if self.trace is not None:
                self.trace.skip(self._read_log())  # what ran between levels is no level's
            drift = self.drift_at(concurrency)
            result = self.host.run_level(self.server, concurrency, load, both, drift)
            shares = self.trace.level_shares(self._read_log()) if self.trace else None
            row = self._write_level(shape, concurrency, load, result, shares)
        self._measured[shape.label, concurrency] = result
        self._alive()
        return row

    def _write_level(
        self,
        shape: Shape,
        concurrency: int,
        load: LoadSpec,
        result: LevelResult,
        shares: dict[int, float] | None,
    ) -> dict[str, Any]:
        """The level's requests, then its row (the row marks it done: resume skips it)."""
        rows = request_rows(self.ctx, self.label, concurrency, result, shape.label)
        self.store.write_requests(
            self.ctx.run_id, self.label, concurrency, self.ctx.target, rows,
            self._shape_key(shape),
        )  # fmt: skip
        row = level_row(
            self.ctx, self.server, self.variant, load, self.facts, result, self.command, shares
        )
        self.store.write_level(row, by_shape=self.load.multi_shape)
        return row

    # --- measure more while the server is up (analysis/sequential.py) ---------------
    def run_phase_s(self, phase: str) -> float:
        """Seconds the whole run spent so far in one phase, every variant's on every target:
        the others' from their phase files, this server's from memory (its file may lag)."""
        files = self.store.read_phase_files(self.ctx.run_id)
        others = sum(
            p.get(phase, 0.0) for v, t, p in files if not (v == self.label and t == self.ctx.target)
        )
        return others + self.phases.seconds.get(phase, 0.0)

    def decide_spent_s(self) -> float:
        """Server seconds this run spent measuring more so far, every variant's."""
        return self.run_phase_s("decide_s")

    def decide_budget_s(self) -> float:
        """The run's measure-more budget so far: load.decide_budget_s (0: off), plus
        load.decide_launch_share of the launch-to-ready seconds of every server the run has
        launched, this one's included. Where a launch takes seconds (the simulator) the
        fixed part decides; where it takes minutes (a GPU), a pass at a level can take more
        than the fixed 20 s, and the launches' share is what lets an open level be settled
        on the launch it is measured on instead of a relaunch."""
        if self.load.decide_budget_s <= 0:
            return 0.0
        launches = self.run_phase_s("launch_to_ready_s")
        return self.load.decide_budget_s + self.load.decide_launch_share * launches

    def next_to_decide(self, shape: Shape | None = None) -> DecideStep:
        """The next extra measurement that could settle an open decision at `shape`."""
        shape = shape or self.load.shape
        levels = self.store.read_levels(self.ctx.run_id)
        if levels.empty:
            return Settled("nothing measured")
        mine = (levels["variant"] != self.label) | (levels["target"] == self.ctx.target)
        if self.load.multi_shape:
            mine &= levels["shape"] == shape.label
        here = {c: r for (s, c), r in self._measured.items() if s == shape.label}
        return plan_more(
            answer_rows(levels[mine]),
            self.label,
            passes={c: r.metrics.repeats for c, r in here.items()},
            pass_seconds={
                c: r.metrics.duration_s / max(r.metrics.repeats, 1) for c, r in here.items()
            },
            spent_s=self.decide_spent_s(),
            budget_s=self.decide_budget_s(),
        )

    def measure_more(self, step: MeasureMore, shape: Shape | None = None) -> dict[str, Any]:
        """`step.passes` more passes at a level measured on this launch, pooled with its
        earlier ones (fresh prompts: another seed), and the level rewritten with all."""
        self._require("measure-more", ServerState.READY)
        shape = shape or self.load.shape
        prior = self._measured[shape.label, step.concurrency]
        base = self.load.for_shape(shape)
        done = prior.metrics.repeats
        extra = base.model_copy(
            update={"repeats": step.passes, "seed": base.seed + _MORE_SEED * done,
                    "target_ci": None, "target_cv": None}
        )  # fmt: skip
        with self.phases.timed("decide_s"), self.phases.timed("benchmark_s"):
            if self.trace is not None:
                self.trace.skip(self._read_log())
            drift = self.drift_at(step.concurrency)
            got = self.host.run_level(self.server, step.concurrency, extra, None, drift)
            records = (*prior.records, *(replace(r, repeat=r.repeat + done) for r in got.records))
            pooled = LevelResult(
                metrics=compute_level_metrics(
                    records, step.concurrency, base.max_error_rate, drift
                ),
                records=records,
                started_at=prior.started_at,
                ended_at=got.ended_at,
                repeats=(*prior.repeats, *got.repeats),
                perf_origin=prior.perf_origin,
            )
            shares = self.trace.level_shares(self._read_log()) if self.trace else None
            row = self._write_level(shape, step.concurrency, base, pooled, shares)
        self._measured[shape.label, step.concurrency] = pooled
        self._alive()
        return row

    def skip_reason(
        self, search: SearchSpec, concurrency: int, shape: Shape | None = None
    ) -> str | None:
        """Why an adaptive search need not measure this cell (None: measure it): this
        variant as measured here against the others where the answer takes them from,
        at the same shape."""
        if not (search.adaptive and search.skip_levels) or self.variant.is_baseline:
            return None
        if search.confirm_top and concurrency == max(self.load.concurrency):
            return None
        shape = shape or self.load.shape
        levels = self.store.read_levels(self.ctx.run_id)
        mine = (levels["variant"] != self.label) | (levels["target"] == self.ctx.target)
        if self.load.multi_shape:
            mine &= levels["shape"] == shape.label
        return skip_reason(
            answer_rows(levels[mine]), self.label, concurrency, self.load.concurrency,
            search.margin,
        )  # fmt: skip

    def skip_level(
        self, concurrency: int, reason: str, shape: Shape | None = None
    ) -> dict[str, Any]:
        """Record a cell the search chose not to measure (resume counts it as done, so a
        resumed search makes the same choice)."""
        shape = shape or self.load.shape
        row = skipped_level_row(
            self.ctx, self.server, self.variant, self.load.for_shape(shape), self.facts,
            concurrency, reason, self.command,
        )  # fmt: skip
        self.store.write_level(row, by_shape=self.load.multi_shape)
        log.info("%s at %s: %s", self.label, self.cell_name(shape, concurrency), reason)
        return row

    def ensure_alive(self, after: str) -> None:
        """After a failed level: a dead server ends the variant with its log, not more levels.

        A server that crashed may still be exiting when the level ends: the kernel closes a
        dying process's sockets (its requests fail) before the process is reaped or a
        zombie, so it is looked at again for up to EXIT_GRACE_S before it counts as alive
        (a fresh-clone suite once read a crashed simulator as alive there)."""
        assert self.handle is not None
        deadline = time.monotonic() + EXIT_GRACE_S
        while self.host.is_alive(self.handle) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.host.is_alive(self.handle):
            tail = self.host.tail(self.handle, 30)
            cause = describe_cause(tail)
            raise ServerDiedError(f"server process died during {after}: {cause}", tail)

    def teardown(self) -> TeardownReport | None:
        """Stop the server's process group, then what it left behind, then wait for its
        GPU memory; None when nothing was started since the last teardown."""
        if self.handle is None:
            return None
        limit = self.cleanup.memory_limit if self.cleanup is not None else None
        with self.phases.timed("teardown_s"):
            report = self.host.stop(
                self.handle,
                self.server.env,
                memory_limit=limit or None,
                grace_s=self.server.stop_grace_s,
            )
        self.handle = None
        self.facts = None
        self.trace = None
        self.last_teardown = report
        self.state = ServerState.STOPPED
        return report
