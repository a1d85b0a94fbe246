#!/bin/sh
# Fresh Debian 12 machine -> working Lazarus: install what is missing, build,
# then run the demo (a program killed with SIGKILL and brought back).
# Usage: sh scripts/setup.sh
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh

lz_install_deps
echo "$ make -j2"
make -j2
exec bash scripts/demo.sh
