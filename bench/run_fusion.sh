#!/bin/sh
# run_fusion.sh — issue 5's benchmark in one session: bench_fusion (thunder-c fused / unfused / the
# bandwidth floor, interleaved), bench_fusion_torch.py (PyTorch eager and its copy_ floor),
# bench_gpt2 f32 and bf16 (fused / unfused / GEMM floor, interleaved, plus compile times) and
# bench_gpt2_torch.py, then one combined set of markdown tables (bench/fusion_table.py) with the
# ratios and issue 5's targets. The raw outputs stay in the printed directory.
#
# Usage: bench/run_fusion.sh [-b BUILD_DIR] [-r ROUNDS] [-g GPT2_ITERS] [-G TORCH_BF16_GPT2_ITERS]
#                            [-c COMPILE_REPS] [-o WORKLOADS] [-s]
#   defaults: -b build -r 10 -g 10 -G 3 -c 3; -o gelu_tanh,softmax limits the memory-bound workloads;
#   -s skips the GPT-2 block. Build first (Release):
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build --target bench_fusion bench_gpt2
# Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS default to 2 for both sides (torch.set_num_threads(2)).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=build rounds=10 giters=10 gbf16=3 creps=3 only= skip_gpt2=0
while getopts b:r:g:G:c:o:s opt; do
  case $opt in
    b) build=$OPTARG ;;
    r) rounds=$OPTARG ;;
    g) giters=$OPTARG ;;
    G) gbf16=$OPTARG ;;
    c) creps=$OPTARG ;;
    o) only=$OPTARG ;;
    s) skip_gpt2=1 ;;
    *) sed -n '8,13p' "$0" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-2}"
py=${PYTHON:-$here/../.venv/bin/python}  # the project venv (torch 2.14); PYTHON=... overrides
[ -x "$py" ] || py=python3
for exe in "$build/bench/bench_fusion" "$build/bench/bench_gpt2"; do
  [ -x "$exe" ] || { echo "run_fusion.sh: $exe not built (see the usage in $0)" >&2; exit 2; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/run_fusion-XXXXXX")
set -- # the option arguments are parsed; reuse "$@" for --only
[ -n "$only" ] && set -- --only "$only"

echo "run_fusion.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
  "OMP_NUM_THREADS=$OMP_NUM_THREADS; raw outputs in $out" >&2
echo "  bench_fusion ..." >&2
"$build/bench/bench_fusion" --rounds "$rounds" --compile-reps "$creps" "$@" >"$out/fusion.txt"
echo "  bench_fusion_torch.py ..." >&2
"$py" "$here/bench_fusion_torch.py" --rounds "$rounds" --threads "$OMP_NUM_THREADS" "$@" >"$out/fusion_torch.txt"
if [ "$skip_gpt2" = 0 ]; then
  for dt in f32 bf16; do
    echo "  bench_gpt2 $dt ..." >&2
    "$build/bench/bench_gpt2" 8 256 768 12 "$dt" "$giters" --compile-reps "$creps" >"$out/gpt2_$dt.txt"
  done
  echo "  bench_gpt2_torch.py ..." >&2
  "$py" "$here/bench_gpt2_torch.py" "$giters" --bf16-iters "$gbf16" >"$out/gpt2_torch.txt"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$py" "$here/fusion_table.py" "$out"/*.txt
