#!/bin/sh
# Install what is missing, build, and run every test; then the quick tier and
# the damaged-store suites again with the CLI built with AddressSanitizer and
# UBSan (scripts/sanitize.sh, about 3 minutes; LAZARUS_NO_SANITIZE=1 skips it).
# Usage: sh scripts/test.sh [extra pytest arguments]
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh

lz_install_and_build
lz_install_versitygw
rc=0
if [ "$#" -eq 0 ]; then
    # A second pytest session runs beside the main one (each session ends
    # only processes it started), its output after the main run's:
    # test_slurm.py (~8 minutes, mostly waiting for Slurm: a requeued job
    # starts again ~35 s later), then files that mostly wait too (on the S3
    # server, on paced programs, on timers, on small jobs starting and stopping) and
    # share nothing with the rest (no CPU load of their own, no System V
    # IPC, no cgroup, their own versitygw): together well under the main
    # run, so the second core is used while Slurm and S3 keep the first idle.
    beside="tests/test_slurm.py tests/test_s3_client.py tests/test_s3_flush.py tests/test_s3_stream.py
            tests/test_s3_crypt.py tests/test_s3_fetch.py tests/test_s3_journals.py tests/test_resume.py
            tests/test_files_scenarios.py tests/test_inet_sockets.py tests/test_job_processes.py
            tests/test_launcher_stdio.py tests/test_pty.py tests/test_unix_sockets.py tests/test_outside_changes.py
            tests/test_timers.py tests/test_event_fds.py"
    ignore=""
    for f in $beside; do ignore="$ignore --ignore=$f"; done
    beside_log=$(mktemp /tmp/lazarus-test-beside.XXXXXX)
    echo "$ /usr/bin/python3 -m pytest -q" $beside "  (beside the rest, output below)"
    # shellcheck disable=SC2086
    /usr/bin/python3 -m pytest -q -p no:cacheprovider $beside >"$beside_log" 2>&1 &
    beside_pid=$!
    # the damaged-store suite runs as root here and as an ordinary user in the
    # sanitizer pass below (scripts/sanitize.sh): each identity once
    integrity=${LAZARUS_INTEGRITY_MODE:-}
    if [ -z "$integrity" ] && [ -z "${LAZARUS_NO_SANITIZE:-}" ] && [ "$(id -u)" -eq 0 ]; then integrity=root; fi
    echo "$ LAZARUS_INTEGRITY_MODE=$integrity /usr/bin/python3 -m pytest -q tests" $ignore
    # shellcheck disable=SC2086
    LAZARUS_INTEGRITY_MODE=$integrity /usr/bin/python3 -m pytest -q tests $ignore || rc=$?
    beside_rc=0
    wait "$beside_pid" || beside_rc=$?
    echo "$ (the files run beside the rest)"
    cat "$beside_log"
    rm -f "$beside_log"
    if [ "$rc" -eq 0 ] && [ "$beside_rc" -ne 0 ]; then rc=$beside_rc; fi
else
    echo "$ /usr/bin/python3 -m pytest -q tests $*"
    /usr/bin/python3 -m pytest -q tests "$@" || rc=$?
fi
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    exit 1
fi
src=0
if [ -z "${LAZARUS_NO_SANITIZE:-}" ]; then
    echo "$ sh scripts/sanitize.sh"
    sh scripts/sanitize.sh || src=$?
fi
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi
exit "$src"
