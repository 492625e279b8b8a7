#!/bin/sh
# run_train_bench.sh — issue 7's training benchmarks in one session: bench_gpt2_train.py (a GPT-2 block
# forward + backward, f32 and bf16 autocast: thunder-c vs PyTorch eager vs the GEMM floor), then the
# training example examples/python/train_gpt.py for a fixed number of steps with thunder_c and with
# --eager, and a table of their tokens per second side by side. Raw outputs stay in the printed directory.
#
# Usage: bench/run_train_bench.sh [-b BUILD_DIR] [-i ITERS] [-B BF16_ITERS] [-e EAGER_BF16_ITERS]
#                                 [-d DTYPES] [-n STEPS] [-x EXECUTORS] [-s]
#   defaults: -b build -i 10 -B 10 -e 2 (PyTorch's bf16 autocast step is ~1 min on AVX2-only CPUs)
#   -d f32,bf16 -n 200 training steps per mode; -x fuser,blas,eager passes thunder_c's executors to both
#   programs; -s skips the block benchmark (training only). Build first (Release):
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build
# Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS default to 2 for both sides.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=build iters=10 biters=10 ebiters=2 dtypes=f32,bf16 steps=200 execs= skip_block=0
while getopts b:i:B:e:d:n:x:s opt; do
  case $opt in
    b) build=$OPTARG ;;
    i) iters=$OPTARG ;;
    B) biters=$OPTARG ;;
    e) ebiters=$OPTARG ;;
    d) dtypes=$OPTARG ;;
    n) steps=$OPTARG ;;
    x) execs=$OPTARG ;;
    s) skip_block=1 ;;
    *) sed -n '7,13p' "$0" >&2; exit 2 ;;
  esac
done
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-2}"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-$here/../.venv/bin/python}  # the project venv (torch 2.14); PYTHON=... overrides
[ -x "$py" ] || py=python3
[ -d "$build/python/thunder_c" ] || { echo "run_train_bench.sh: $build/python/thunder_c not built (see $0)" >&2; exit 2; }
out=$(mktemp -d "${TMPDIR:-/tmp}/run_train_bench-XXXXXX")
set --
[ -n "$execs" ] && set -- --executors "$execs"

echo "run_train_bench.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
  "OMP_NUM_THREADS=$OMP_NUM_THREADS; raw outputs in $out" >&2
if [ "$skip_block" = 0 ]; then
  echo "  bench_gpt2_train.py ..." >&2
  "$py" "$here/bench_gpt2_train.py" --iters "$iters" --bf16-iters "$biters" --eager-bf16-iters "$ebiters" \
    --dtypes "$dtypes" --threads "$OMP_NUM_THREADS" "$@" | tee "$out/block.txt"
fi
for mode in thunder_c eager; do
  echo "  train_gpt.py ($mode, $steps steps) ..." >&2
  if [ "$mode" = eager ]; then
    "$py" "$here/../examples/python/train_gpt.py" --steps "$steps" --eager >"$out/train_$mode.txt"
  else
    "$py" "$here/../examples/python/train_gpt.py" --steps "$steps" "$@" >"$out/train_$mode.txt"
  fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# train_gpt.py's last line: "<mode>: N tokens/s over S steps (M tokens/s after the first step, which took X s)"
"$py" - "$out/train_thunder_c.txt" "$out/train_eager.txt" "$steps" <<'EOF'
import re, sys
rows = []
for path in sys.argv[1:3]:
    text = open(path).read()
    m = re.search(r"^(.*?): (\d+) tokens/s over (\d+) steps(?: \((\d+) tokens/s after the first step, which took "
                  r"([\d.]+) s\))?$", text, re.M)
    loss = re.search(r"^mean loss of the last \d+ steps: ([\d.]+) nats", text, re.M)
    if not m:
        sys.exit(f"run_train_bench.sh: no tokens/s line in {path}")
    rows.append((m.group(1), int(m.group(2)), int(m.group(4)) if m.group(4) else None,
                 float(m.group(5)) if m.group(5) else None, float(loss.group(1)) if loss else None))
print(f"\n### Training example (examples/python/train_gpt.py, {sys.argv[3]} steps, batch 16 x 64 tokens)\n")
print("| mode | tokens/s (all steps) | tokens/s after the first step | first step s | mean loss of the last min(20, steps) steps |")
print("|---|---|---|---|---|")
for mode, r_all, r_after, first, loss in rows:
    f = lambda v, fmt: (fmt % v) if v is not None else "—"
    print(f"| {mode} | {r_all} | {f(r_after, '%d')} | {f(first, '%.2f')} | {f(loss, '%.4f')} |")
(_, a_all, a_after, _, _), (_, e_all, e_after, _, _) = rows
ratio = f"{a_after / e_after:.2f}x" if a_after and e_after else "—"
print(f"\nthunder_c / eager tokens/s: {a_all / e_all:.2f}x over all steps, {ratio} after the first step")
EOF
