#!/usr/bin/env bash
# README command 2: set up (idempotent), build, run the whole test suite.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh"
build=${FOLDNORM_BUILD:-$here/build}
echo "[test] running ctest in $build"
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900
