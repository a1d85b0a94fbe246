#!/bin/sh
# Install what is missing, build, and run every test.
# Usage: sh scripts/test.sh [extra pytest arguments]
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh

lz_install_and_build
echo "$ /usr/bin/python3 -m pytest -q tests${*:+ $*}"
rc=0
/usr/bin/python3 -m pytest -q tests "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    exit 1
fi
exit "$rc"
