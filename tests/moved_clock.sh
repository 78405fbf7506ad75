#!/usr/bin/env bash
# Run a command with every process's clock moved to a given instant (libfaketime, from
# Debian's faketime package): the same offset for the command and all it starts (the
# Prefect server, its worker, the simulator), so they agree with each other and the
# clock runs on from there.
#   tests/moved_clock.sh 2027-03-26T12:00:00+00:00 .venv/bin/pytest tests/e2e/test_run_names.py
set -euo pipefail
at=$1
shift
lib=$(find /usr/lib /usr/lib64 -name libfaketime.so.1 2>/dev/null | head -n1)
if [ -z "$lib" ]; then
    echo "moved_clock.sh: libfaketime not found (apt-get install faketime)" >&2
    exit 2
fi
offset=$(python3 -c 'import sys, time; from datetime import datetime
print(int(datetime.fromisoformat(sys.argv[1]).timestamp() - time.time()))' "$at")
case $offset in -*) FAKETIME=$offset ;; *) FAKETIME=+$offset ;; esac
# libfaketime 0.9.10 moves the monotonic clock too. Limits: a timed lock wait
# (threading.Event().wait(t): sem_clockwait, not intercepted) waits until the real
# clock reaches the moved deadline, i.e. hangs; FAKETIME_DONT_FAKE_MONOTONIC=1 instead
# breaks time.sleep (EINVAL). So only the calendar's tests run here, not the whole suite;
# tests/moved_system_clock.sh moves the system clock instead (root, disposable machine).
export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" FAKETIME
exec "$@"
