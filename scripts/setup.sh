#!/bin/sh
# Fresh Debian 12 machine -> working Lazarus: install what is missing, build,
# then run the demo (a program killed with SIGKILL and brought back).
# Usage: sh scripts/setup.sh
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh

lz_install_and_build
exec bash scripts/demo.sh
