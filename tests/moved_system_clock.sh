#!/usr/bin/env bash
# Run a command with this machine's system clock moved to a given instant, and put the
# clock back after (to where it would be had it not moved), however the command ends.
#   sudo tests/moved_system_clock.sh 2027-03-26T12:00:00+00:00 make test
# The whole suite at a moved clock (issue 29): libfaketime (tests/moved_clock.sh, `make
# test-clock`) cannot run it, since it moves the monotonic clock too and timed lock waits
# then hang. Moving the system clock moves every process's wall clock and nothing else.
# Only on a disposable VM or CI machine where you are root: it changes the clock for
# everything running there (no NTP daemon may be setting it meanwhile).
set -euo pipefail
at=$1
shift
if [ "$(id -u)" != 0 ]; then
    echo "moved_system_clock.sh: must run as root (it sets the system clock)" >&2
    exit 2
fi
real=$(date +%s.%N)
up=$(cut -d' ' -f1 /proc/uptime)
restore() {
    now_up=$(cut -d' ' -f1 /proc/uptime)
    date -s "@$(python3 -c 'import sys; print(f"{float(sys.argv[1]) + float(sys.argv[2]) - float(sys.argv[3]):.3f}")' "$real" "$now_up" "$up")" >/dev/null
    echo "moved_system_clock.sh: clock back at $(date -u '+%F %T') UTC" >&2
}
trap restore EXIT
date -s "$at" >/dev/null
echo "moved_system_clock.sh: clock moved to $(date -u '+%F %T') UTC" >&2
"$@"
