#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*.c) with clang + ASan/UBSan and runs each for SECONDS
# (default 60): fuzz_parser (trace text -> parse, print, verify) and fuzz_io (.npy and .safetensors
# readers). Needs clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev).
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
out=build-fuzz
mkdir -p "$out"
srcs=$(find src -name '*.c' | sort)
for target in tests/fuzz/*.c; do
  name=$(basename "$target" .c)
  clang -g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -I/usr/include/cjson -fopenmp \
    "$target" $srcs -o "$out/$name" -lcjson -ldnnl -lm -ldl
  corpus="$out/$name-corpus"
  mkdir -p "$corpus"
  if [ "$name" = fuzz_parser ]; then cp tests/golden/*.py examples/*.py examples/seeds/*.py "$corpus"/ 2>/dev/null || true; fi
  echo "== $name: ${secs}s"
  "./$out/$name" -max_total_time="$secs" -timeout=10 "$corpus" 2>&1 | tail -3
done
