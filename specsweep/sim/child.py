"""``python -m specsweep.sim.child``: one simulated sglang subprocess.

sglang's launcher starts one ``sglang::scheduler[_DP0][_TP0]`` process per GPU rank and
a ``sglang::detokenizer``; they hold the GPU memory, show up under those names in
``ps``/``nvidia-smi`` and are what stale-server cleanup must find and kill. The
simulator's children do no work (the launcher runs the performance model); they only
have to exist under the right names and die the right way:

* normally they die with the launcher however it dies: ``PR_SET_PDEATHSIG`` asks the
  kernel for SIGKILL when the parent exits (what sglang's
  ``kill_itself_when_parent_died`` does), and EOF on stdin (the launcher holds the
  other end of the pipe) is a second, portable watch;
* ``--orphan`` plays the bug users report: a new session (a process-group kill misses
  it), SIGTERM/SIGINT/SIGHUP ignored, no parent watch; it is reparented to init when
  the launcher goes and lives on until SIGKILL.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from collections.abc import Sequence

import setproctitle

PR_SET_PDEATHSIG = 1
STARTED = b"started\n"  # one line on stdout, then stdout is closed


def die_with_parent(parent_pid: int) -> None:
    """Ask for SIGKILL when the parent exits; exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(0)


def started() -> None:
    """Tell the launcher this process is what it will be (named, in its session, with
    its signals set): sglang's launcher waits for its schedulers' ready message before it
    opens the port, so nothing can reach or kill the server while they are half made."""
    os.write(sys.stdout.fileno(), STARTED)
    os.close(sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specsweep.sim.child")
    parser.add_argument("--title", required=True, help="process title, e.g. sglang::scheduler")
    parser.add_argument("--parent", type=int, required=True, help="launcher pid")
    parser.add_argument("--orphan", action="store_true", help="survive the launcher")
    ns = parser.parse_args(argv)
    setproctitle.setproctitle(ns.title)
    if ns.orphan:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        started()
        while True:
            signal.pause()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl+C on the group: go quietly
    die_with_parent(ns.parent)
    started()
    try:
        while sys.stdin.buffer.read(4096):
            pass  # the launcher never writes; EOF means it is gone
    except OSError:
        pass
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
