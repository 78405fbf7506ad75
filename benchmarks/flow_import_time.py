"""Import time of the module a fleet host's flow run loads, against the sweep's module.

Every fleet variant is a new flow-run process that imports its flow before anything
runs, so that import is paid once per variant per host. `specsweep.flows.fleet_variant` keeps out
what only the sweep needs (pandas, matplotlib, the report); this measures what that saves,
alternating the two imports in fresh interpreters so machine load hits both alike:

    .venv/bin/python benchmarks/flow_import_time.py --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

MODULES = ("specsweep.flows.fleet_variant", "specsweep.flows.fleet_sweep")


def import_seconds(module: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {m: [] for m in MODULES}
    for _ in range(args.rounds):
        for module in MODULES:
            times[module].append(import_seconds(module))
    base = statistics.median(times[MODULES[1]])
    for module in MODULES:
        med = statistics.median(times[module])
        print(
            f"{module:22s} median {med:5.2f} s  (min {min(times[module]):.2f}, "
            f"max {max(times[module]):.2f})  ratio {med / base:.2f}"
        )


if __name__ == "__main__":
    main()
