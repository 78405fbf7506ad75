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
    "Slow and flapping health": (
        "health.py: the one-token generation skipped (a 200 /health is ready); a 503 after a "
        "200 taken as the end of the wait; the probe's timeout (0.2 s) below the slow /health",
        "fails (each); the first two only since the test makes the wait see a failed "
        "generation and the flap's 503",
    ),
    "Hang during weight loading": (
        "pipeline.py: `teardown` stops only a server that became ready",
        "fails (the hung server's launch record and process remain)",
    ),
    "Orchestrator SIGKILLed mid-sweep, then resumed": (
        "pipeline.py: `levels_to_measure` ignores the levels already written",
        "fails (the level measured before the kill is measured again)",
    ),
    "SSH connection lost mid-level": (
        "ssh/session.py: the lost command's kill by operation id skipped; the retry after a "
        "lost connection dropped",
        "fails (each); the first only since the test stops the lost load generator, which "
        "before died of its closed channel by itself",
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
        "its test run against it. Rows without a mutation here were checked that way before",
        "these were recorded (issue 29).",
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
