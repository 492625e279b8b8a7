#!/usr/bin/env bash
# Builds thunder-c and runs the main job: the bundled GPT-2 block (examples/gpt2_block.py) with its
# weights (made at build time) and a random input, printing the trace as written, the execution trace
# (every torch-level op decomposed into the prims the executors run) and output statistics.
# Usage: scripts/demo.sh [PROGRAM [thunder run options...]]   (default: the GPT-2 block)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTHUNDER_WERROR=ON > /dev/null
cmake --build build
if [ "$#" -gt 0 ]; then
  exec ./build/thunder run "$@"
fi
exec ./build/thunder run examples/gpt2_block.py --input build/examples/gpt2_block.safetensors --random-inputs 0 \
  --print-trace
