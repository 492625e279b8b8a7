#!/usr/bin/env bash
# The long sweeps, against the Release build that scripts/test.sh makes in build/: the full edge sweep
# of tests/python/test_edges.py (THUNDER_EDGE_FULL=1: float16 too, every case again on rows of 37).
# scripts/test.sh --full runs them after the suite; .ci/run runs them when the suite left it the time.
set -euo pipefail
cd "$(dirname "$0")/.."
THUNDER_EDGE_FULL=1 THUNDER_BUILD_DIR="$PWD/build" THUNDER_SOURCE_DIR="$PWD" \
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/test_edges.py
