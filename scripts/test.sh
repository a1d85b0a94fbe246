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
    # test_slurm.py spends its ~8 minutes mostly waiting for Slurm (a requeued
    # job starts again ~35 s later): it runs beside the rest, in a pytest
    # session of its own (each session ends only processes it started), and
    # its output follows the main run's.
    slurm_log=$(mktemp /tmp/lazarus-test-slurm.XXXXXX)
    echo "$ /usr/bin/python3 -m pytest -q tests/test_slurm.py   (beside the rest, output below)"
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/test_slurm.py >"$slurm_log" 2>&1 &
    slurm_pid=$!
    # the damaged-store suite runs as root here and as an ordinary user in the
    # sanitizer pass below (scripts/sanitize.sh): each identity once
    integrity=${LAZARUS_INTEGRITY_MODE:-}
    if [ -z "$integrity" ] && [ -z "${LAZARUS_NO_SANITIZE:-}" ] && [ "$(id -u)" -eq 0 ]; then integrity=root; fi
    echo "$ LAZARUS_INTEGRITY_MODE=$integrity /usr/bin/python3 -m pytest -q tests --ignore=tests/test_slurm.py"
    LAZARUS_INTEGRITY_MODE=$integrity /usr/bin/python3 -m pytest -q tests --ignore=tests/test_slurm.py || rc=$?
    slurm_rc=0
    wait "$slurm_pid" || slurm_rc=$?
    echo "$ (tests/test_slurm.py, run beside the rest)"
    cat "$slurm_log"
    rm -f "$slurm_log"
    if [ "$rc" -eq 0 ] && [ "$slurm_rc" -ne 0 ]; then rc=$slurm_rc; fi
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
