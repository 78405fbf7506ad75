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
