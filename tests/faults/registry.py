"""The fault matrix: each fault test registers what it injects and what it checks, and
docs/faults.md is rendered from this registry (a test keeps the two in step).

    .venv/bin/python -m tests.faults.registry --write   # regenerate docs/faults.md
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

DOC = Path(__file__).resolve().parents[2] / "docs" / "faults.md"
# Modules holding @fault tests, imported to fill the registry.
MODULES = (
    "tests.faults.test_faults",
    "tests.flows.test_fault_flows",
    "tests.flows.test_adaptive_flow",
    "tests.flows.test_search_flow",
    "tests.ssh.test_ssh_target",
    "tests.integration.test_cleanup",
    "tests.integration.test_gpu_cleanup",
    "tests.e2e.test_deployments",
)


@dataclass(frozen=True)
class Fault:
    name: str
    injected: str
    outcome: str
    test: str
    module: str
    line: int


FAULTS: dict[str, Fault] = {}

# How a row's test was shown to catch a regression: the behaviour broken in the code (a
# minimal mutation, never committed), the test run against it, and what it did then.
MUTATIONS: dict[str, tuple[str, str]] = {
    "5xx bursts during a level": (
        "loadgen/metrics.py: `max_error_rate` not applied (a level is `failed` only when no "
        "request completed)",
        "fails (the strict level is `ok`)",
    ),
    "Streams dropped mid-response": (
        "loadgen/client.py: a connection lost mid-stream is no error (`error = None`); that "
        "and the missing-`[DONE]` check dropped (a cut stream is ok with its partial tokens)",
        "fails (each): the first on the error (the missing `[DONE]`, not the closed "
        "connection), the second on the failed count (0)",
    ),
    "Slow and flapping health": (
        "health.py: the one-token generation skipped (a 200 /health is ready); a 503 after a "
        "200 taken as the end of the wait; the probe's timeout (0.2 s) below the slow /health",
        "fails (each); the first two only since the test makes the wait see a failed "
        "generation and the flap's 503",
    ),
    "Results directory not writable": (
        "flows/run_records.py: `begin_run` does not call `check_results_dir`; "
        "results/preflight.py: the probe write (mkdir, temp file) skipped",
        "fails (each: `NotADirectoryError`, not `ConfigError`); the first only since the "
        "test runs the sweep (before: it called `check_results_dir` alone and passed)",
    ),
    "Disk full": (
        "results/preflight.py: the free-space check skipped; the probe write skipped; ENOSPC "
        'not named ("the disk is full" replaced by the OS\'s message)',
        "fails (each): the 4 MiB disk passes; the 128 KiB one is refused for its free space, "
        'not as full; it is refused as "No space left on device", not as full (the check\'s '
        "call before launch: the unwritable-directory row's test)",
    ),
    "Writer killed mid-write": (
        "results/location.py: `write` writes the final name directly (no temp file and "
        "`os.replace`)",
        "fails (the half-written bytes are under the final name `v__c00005@t.parquet`)",
    ),
    "Crash during weight loading": (
        "flows/matrix_sweep.py: a failed variant's error not recorded (`errors` not set); "
        "errors.py: every death `transient` (the CUDA OOM relaunched)",
        "fails (each): no `SweepFailed`; the second only since the test counts the "
        "variant's launches in its log (before: passed, the OOM was relaunched once)",
    ),
    "Server crashes in the middle of a level": (
        "pipeline.py: a level not written when the server died during it; "
        "flows/benchmark_variant.py: no `ensure_alive` after a failed level",
        "fails (each): the dead variant's c=4 level is missing; no `SweepFailed` (c=8 is "
        "measured against the dead server)",
    ),
    "Hang during weight loading": (
        "pipeline.py: `teardown` stops only a server that became ready",
        "fails (the hung server's launch record and process remain)",
    ),
    "Orchestrator SIGKILLed mid-sweep, then resumed": (
        "pipeline.py: `levels_to_measure` ignores the levels already written",
        "fails (the level measured before the kill is measured again)",
    ),
    "Target's sglang lacks the adaptive flag": (
        "pipeline.py: `check_target_version` asks the version, never calls `check_version`",
        "fails (`SweepFailed`, not `UnsupportedByVersion`: the variant was launched and died "
        "of the unrecognized flag)",
    ),
    "Server falls back to static speculation": (
        "pipeline.py: `_start_trace` does not look for `fallback_reason` in the log",
        "fails (no `SweepFailed`: the static server is measured under the adaptive name)",
    ),
    "Server ignores continuous_usage_stats": (
        "loadgen/client.py: chunk tokens always known (`known = True`: not checked against "
        "the final usage)",
        "fails (`chunk_tokens_unknown` is 0, not every request)",
    ),
    "Adaptive search SIGKILLed mid-run, then resumed": (
        "search/planner.py: `next_step` never finishes a variant launched before and left "
        "with levels missing (the resume branch skipped)",
        "fails (the interrupted seed is never relaunched: its c=16 level stays missing)",
    ),
    "SSH connection lost mid-level": (
        "ssh/session.py: the lost command's kill by operation id skipped; the retry after a "
        "lost connection dropped",
        "fails (each); the first only since the test stops the lost load generator, which "
        "before died of its closed channel by itself",
    ),
    "Port held by a foreign process": (
        "targets/cleanup.py: the port's listeners not looked at; every listener taken as "
        "ours (`is_ours` skipped)",
        "fails (each: no `StaleProcessError`)",
    ),
    "Orphaned schedulers from a previous run": (
        "process.py: no SIGKILL after the grace (SIGTERM only)",
        "fails (the orphan ignores SIGTERM)",
    ),
    "Orphaned scheduler at the end of the last variant": (
        "teardown.py: what left the server's group is not looked for (`leftovers = []`)",
        "fails, and so does the flow test `tests/flows/test_step_sweep_flow.py::"
        "test_a_sweep_ends_with_the_gpus_memory_back_and_says_so`",
    ),
    "Flow cancelled from Prefect": (
        "loadgen/runner.py: the signal handler's exception swallowed in the event loop (the "
        "level runs on until the worker's SIGKILL; the hook still stops the server)",
        "fails since the test asserts the variant's own teardown ran (before: passed, the "
        "hook hid it)",
    ),
}


def fault(name: str, *, injected: str, outcome: str) -> Callable[[F], F]:
    """Register a test as the proof of one row of the fault matrix."""

    def register(fn: F) -> F:
        test = f"{fn.__module__.replace('.', '/')}.py::{fn.__name__}"
        module, line = fn.__module__, fn.__code__.co_firstlineno
        FAULTS[name] = Fault(name, injected, outcome, test, module, line)
        return fn

    return register


def collect() -> list[Fault]:
    for module in MODULES:
        importlib.import_module(module)
    # pytest may have imported the modules in another order: sort, never depend on it
    order = {m: i for i, m in enumerate(MODULES)}
    return sorted(FAULTS.values(), key=lambda f: (order.get(f.module, len(order)), f.line))


def render(faults: list[Fault]) -> str:
    lines = [
        "# Faults and what specsweep does about them",
        "",
        "Generated from the fault tests (`python -m tests.faults.registry --write`); each row",
        "is checked by the test named in it, in CI, with real processes, real HTTP and, for",
        'SSH, a real sshd. "Nothing lost" means every level measured before the fault is in',
        "the results and every failure is recorded in the `runs` table.",
        "",
        "| fault | injected with | observed outcome (asserted) | test |",
        "|---|---|---|---|",
    ]
    for f in faults:
        lines.append(f"| {f.name} | {f.injected} | {f.outcome} | `{f.test}` |")
    lines += [
        "",
        "## How each row is checked",
        "",
        "Each row's behaviour was broken in the code (a minimal mutation, reverted after) and",
        "its test run against it.",
    ]
    if any(f.name not in MUTATIONS for f in faults):
        lines[-1] += " Rows without a mutation here were checked that way before"
        lines.append("these were recorded (issue 29).")
    lines += [
        "",
        "| fault | test | mutation | result |",
        "|---|---|---|---|",
    ]
    for f in faults:
        mutation, result = MUTATIONS.get(f.name, ("not recorded", "fails (checked before)"))
        lines.append(f"| {f.name} | `{f.test.rpartition('::')[2]}` | {mutation} | {result} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {DOC}")
    args = parser.parse_args()
    # As __main__ this module is not the `tests.faults.registry` the tests register in.
    from tests.faults import registry

    text = render(registry.collect())
    if args.write:
        DOC.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
