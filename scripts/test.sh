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
echo "$ /usr/bin/python3 -m pytest -q tests${*:+ $*}"
rc=0
/usr/bin/python3 -m pytest -q tests "$@" || rc=$?
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
