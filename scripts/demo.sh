#!/usr/bin/env bash
# Builds thunder-c and runs the main job on the bundled default example: a GPT-2 block written as an
# ordinary PyTorch nn.Module (examples/python/gpt2_module.py) compiled with thunder_c.jit — checked
# against PyTorch eager, its traces printed (initial and execution), and both timed
# (examples/python/quickstart.py).
# Usage: scripts/demo.sh                      the Python quickstart (options: --batch N --seq N --full-trace)
#        scripts/demo.sh PROGRAM [options...]  `thunder run` on a trace program, e.g. examples/gpt2_block.py
#        scripts/demo.sh --model NAME [options] a model of the zoo (tests/models/zoo.py: gpt2, llama2c, lstm,
#                                              resnet18, ...) through thunder_c.jit: checked against eager,
#                                              its traces, and a timing table against eager and torch.compile
#                                              (options: --reps N --full-trace --no-compile)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTHUNDER_WERROR=ON > /dev/null
cmake --build build
if [ "$#" -gt 0 ] && [ "${1#--}" = "$1" ]; then
  exec ./build/thunder run "$@"
fi
if [ "${1:-}" = "--model" ]; then
  if [ "$#" -lt 2 ]; then echo "usage: scripts/demo.sh --model NAME [--reps N --full-trace --no-compile]" >&2; exit 2; fi
  shift
  PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}" exec .venv/bin/python tests/models/demo.py "$@"
fi
PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}" exec .venv/bin/python examples/python/quickstart.py "$@"
