#!/bin/sh
# The CLI built with AddressSanitizer and UBSan (`make sanitize`: build-asan/,
# with copies of the normal restorer and runtime) through the quick tier and
# the damaged-store suites (`-m "quick or integrity"`).  Any sanitizer report
# fails the run, whatever the test thought of the command's exit status (a
# damaged store's `verify` or `restart` is expected to fail): ASan writes its
# reports to files here, UBSan (which ignores log_path when linked with ASan)
# to stderr, which conftest.py searches in every command's output and copies
# here (LAZARUS_SANITIZER_LOG); they are printed at the end.
#
# The codec's tests are left out: they compile their own probe from the
# sources (no LAZARUS_BUILD).  Leak detection is off: the CLI is a command
# that leaves what it keeps for its whole life (the store's path from
# abs_dir, the supervisor's table of processes) to exit, by design.
#
# Usage: sh scripts/sanitize.sh [extra pytest arguments]
set -eu
cd "$(dirname "$0")/.."

echo "$ make -j2 all sanitize"
make -j2 all sanitize >/dev/null
logs=$(mktemp -d /tmp/lazarus-sanitize.XXXXXX)
chmod 1777 "$logs" # the [user] variants run the CLI as nobody
trap 'rm -rf "$logs"' EXIT
LAZARUS_BUILD=$(pwd)/build-asan
ASAN_OPTIONS="detect_leaks=0:log_path=$logs/asan:log_exe_name=1"
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
LAZARUS_SANITIZER_LOG=$logs
export LAZARUS_BUILD ASAN_OPTIONS UBSAN_OPTIONS LAZARUS_SANITIZER_LOG
# the store-integrity suite once (as an ordinary user: as root it runs the
# same cases again)
LAZARUS_INTEGRITY_MODE=${LAZARUS_INTEGRITY_MODE:-user}
export LAZARUS_INTEGRITY_MODE

echo "$ LAZARUS_BUILD=build-asan /usr/bin/python3 -m pytest -q -m 'quick or integrity' --ignore=tests/test_codec.py tests${*:+ $*}"
rc=0
/usr/bin/python3 -m pytest -q -m "quick or integrity" --ignore=tests/test_codec.py tests "$@" || rc=$?
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
    echo "sanitize.sh: sanitizer reports:" >&2
    for f in $reports; do
        echo "--- $f" >&2
        cat "$f" >&2
    done
    exit 1
fi
if [ "$rc" -ne 0 ]; then
    echo "sanitize.sh: the tests failed with the sanitizer build (exit $rc)" >&2
    exit "$rc"
fi
echo "sanitize.sh: no sanitizer report"
