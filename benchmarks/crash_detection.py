"""How fast does the health wait notice a server that dies while loading?

The seeds' curl loops noticed a crash only at their 15-minute timeout. Here the
simulator crashes CRASH_AFTER_S into loading; a watcher thread timestamps the
process's death (polling every millisecond), and the script reports how long
after it `wait_until_ready` raised ServerDiedError, over several trials.

    .venv/bin/python benchmarks/crash_detection.py [--trials 10] [--ssh]

``--ssh`` runs the same trials on an SSH target: a real sshd on 127.0.0.1
started for the run (tests/sshd.py; needs openssh-server), once with the wait
on the host (drive_from=target, the default) and once from here
(drive_from=orchestrator, liveness polled over SSH every 0.5 s).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import ServerDiedError
from specsweep.pipeline import VariantServer
from specsweep.results.rows import RunContext
from specsweep.targets.process import is_running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_trial(workdir: Path, phase: str, target: dict | None = None) -> tuple[float, float]:
    config = parse_config(
        {
            "target": target or {"workdir": str(workdir)},
            "server": {
                "backend": "simulator",
                "model_path": "sim/m",
                "port": free_port(),
                "startup_timeout_s": 600,
                "env": {
                    "SPECSWEEP_SIM_CRASH": phase,
                    "SPECSWEEP_SIM_CRASH_AFTER_S": "0.5",
                    "SPECSWEEP_SIM_LOAD_SECONDS": "0.3" if phase == "warmup" else "600",
                    "SPECSWEEP_SIM_WARMUP_SECONDS": "600",
                },
            },
            "variants": [{}],
        }
    )
    server = VariantServer.for_variant(
        config, BASELINE, RunContext("bench", "bench", "bench", "local")
    )
    server.kill_stale()
    handle = server.launch()
    died_at: list[float] = []

    def watch() -> None:
        while is_running(handle.pid, handle.create_time):
            time.sleep(0.001)
        died_at.append(time.monotonic())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.monotonic()
    try:
        server.wait_for_health()
        raise SystemExit("the server did not crash")
    except ServerDiedError:
        raised_at = time.monotonic()
    finally:
        server.teardown()
    watcher.join(5)
    return raised_at - died_at[0], raised_at - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--ssh", action="store_true", help="also over SSH (local sshd)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        targets: list[tuple[str, dict | None]] = [("local", None)]
        sshd = None
        if args.ssh:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.sshd import start_sshd

            sshd = start_sshd(Path(tmp) / "sshd")
            remote = Path(tmp) / "remote"
            targets += [
                ("ssh", sshd.target(remote)),
                ("ssh/orch", sshd.target(remote, drive_from="orchestrator")),
            ]
        try:
            for name, target in targets:
                run_trials(Path(tmp), name, target, args.trials)
        finally:
            if sshd is not None:
                sshd.stop()


def run_trials(tmp: Path, name: str, target: dict | None, trials: int) -> None:
    for phase in ("load", "warmup"):
        delays, totals = zip(*(one_trial(tmp, phase, target) for _ in range(trials)), strict=True)
        print(
            f"{name:8s} crash during {phase:6s}: detected "
            f"{statistics.median(delays) * 1000:6.1f} ms "
            f"(median), {max(delays) * 1000:6.1f} ms (max) after the process died; "
            f"wait ended {statistics.median(totals):.2f} s after it began (n={trials})"
        )


if __name__ == "__main__":
    main()
