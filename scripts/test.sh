#!/usr/bin/env bash
# Builds thunder-c and runs the whole test suite: C unit tests (cmocka, CTest), the exhaustive dtype
# sweeps, the Python tests (pytest under .venv/bin/python against NumPy and torch 2.14.1, including
# PyTorch's OpInfo samples), then the C tests and the Python frontend's tests again in an
# AddressSanitizer + UndefinedBehaviorSanitizer build. Warnings are errors. scripts/install-deps.sh
# installs the Debian packages and makes .venv/ first.
#
# --full adds the long sweeps afterwards (scripts/sweeps.sh: the full edge sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
  esac
done
./scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTHUNDER_WERROR=ON > /dev/null
cmake --build build
python3 scripts/check_layers.py --objects build
ctest --test-dir build --output-on-failure -j "$jobs"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTHUNDER_WERROR=ON -DTHUNDER_SANITIZE=ON > /dev/null
cmake --build build-asan
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit
ctest --test-dir build-asan --output-on-failure -L asan
if [ "$full" = 1 ]; then ./scripts/sweeps.sh; fi
