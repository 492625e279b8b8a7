"""Reductions: thunder_c.jit against PyTorch eager, in one process, next to the read floor.

Workloads (f32 and bf16 inputs, shapes from a GPT-2 block's activations and gradients and a wide one):
sum, mean, amax and var over the last dim (rows) and over the first dim (columns: bias gradients), and
a column sum of a product (a reduction with a pointwise prologue). Rows per workload, interleaved one of
each per round after a warm-up round, so drift hits every row alike:
  floor     one OpenMP pass reading the input once (bench/floor.c, loaded with ctypes): the bytes any
            reduction of that input must read
  PyTorch   the function itself
  thunder_c thunder_c.jit(fn), default executors (fuser, blas, eager)
  eager     thunder_c.jit(fn, executors=["eager"]): the eager executor's kernels alone
Each: min / median / max ms; ratios of medians: thunder_c/floor, PyTorch/thunder_c, eager/thunder_c.

Run (Release build; never a timed test):
    cmake --build build --target bench_floor
    OMP_NUM_THREADS=2 PYTHONPATH=build/python .venv/bin/python bench/bench_reduce.py [--build build]
        [--rounds 15] [--only sum_rows,amax_cols] [--dtypes f32,bf16]
Workloads (--only): sum_rows sum_cols mean_rows amax_rows amax_cols var_rows var_cols prod_sum_cols.
Threads: torch.set_num_threads and thunder-c both use OMP_NUM_THREADS (default 2); with the load
average above that, every row lands on a few fixed steps and the ratios mean nothing."""
import argparse
import ctypes
import os
import statistics
import time

import torch

import thunder_c

WORKLOADS = [
    # name (for --only), function, its printed form
    ("sum_rows", lambda x: x.sum(-1), "x.sum(-1)"),
    ("sum_cols", lambda x: x.sum(0), "x.sum(0)"),
    ("mean_rows", lambda x: x.mean(-1), "x.mean(-1)"),
    ("amax_rows", lambda x: x.amax(-1), "x.amax(-1)"),
    ("amax_cols", lambda x: x.amax(0), "x.amax(0)"),
    ("var_rows", lambda x: x.var(-1), "x.var(-1)"),
    ("var_cols", lambda x: x.var(0), "x.var(0)"),
    ("prod_sum_cols", lambda x: (x * 1.5).sum(0), "(x * 1.5).sum(0)"),
]
SHAPES = [(8192, 1024), (2048, 3072), (16384, 256)]


def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    ap.add_argument("--dtypes", default="f32,bf16")
    args = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    thunder_c.set_num_threads(threads)
    lib = ctypes.CDLL(os.path.join(args.build, "bench", "libbench_floor.so"))
    lib.th_bench_read_ms.restype = ctypes.c_double
    lib.th_bench_read_ms.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
    sink = ctypes.c_uint64(0)
    only = set(args.only.split(",")) if args.only else None
    names = [w[0] for w in WORKLOADS]
    if only and not only <= set(names):
        ap.error(f"--only: unknown workload(s) {', '.join(sorted(only - set(names)))}; expected some of {', '.join(names)}")
    if not set(args.dtypes.split(",")) <= {"f32", "bf16"}:
        ap.error(f"--dtypes: expected f32 and/or bf16, but got {args.dtypes}")
    dts = {"f32": torch.float32, "bf16": torch.bfloat16}
    print(f"threads {threads}, rounds {args.rounds}, torch {torch.__version__}; ms: min / median / max\n")
    print("| workload | dtype | shape | floor (read) | PyTorch | thunder_c | eager only | thunder_c/floor "
          "| PyTorch/thunder_c | eager/thunder_c |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, fn, text in WORKLOADS:
        if only and name not in only:
            continue
        for dname in args.dtypes.split(","):
            for shape in SHAPES:
                gen = torch.Generator().manual_seed(0)
                x = torch.randn(*shape, generator=gen).to(dts[dname])
                jf = thunder_c.jit(fn)
                je = thunder_c.jit(fn, executors=["eager"])
                ref = fn(x.double())
                got = jf(x).double()
                err = (got - ref).abs().max().item() / max(1.0, ref.abs().max().item())
                rows = {"floor": [], "torch": [], "tc": [], "eager": []}
                nbytes = x.numel() * x.element_size()

                def floor():
                    lib.th_bench_read_ms(x.data_ptr(), nbytes, ctypes.byref(sink))

                runs = [("floor", floor), ("torch", lambda: fn(x)), ("tc", lambda: jf(x)), ("eager", lambda: je(x))]
                for r in range(args.rounds + 1):
                    for key, call in runs:
                        t0 = time.perf_counter()
                        call()
                        ms = (time.perf_counter() - t0) * 1e3
                        if r > 0:
                            rows[key].append(ms)
                s = {k: mmm(v) for k, v in rows.items()}
                fmt = lambda t: f"{t[0]:.3f} / {t[1]:.3f} / {t[2]:.3f}"  # noqa: E731
                print(f"| `{text}` | {dname} | {list(shape)} | {fmt(s['floor'])} | {fmt(s['torch'])} | "
                      f"{fmt(s['tc'])} | {fmt(s['eager'])} | {s['tc'][1] / s['floor'][1]:.2f}x | "
                      f"{s['torch'][1] / s['tc'][1]:.2f}x | {s['eager'][1] / s['tc'][1]:.2f}x |"
                      + (f" (max rel. err vs float64 {err:.1e})" if err > 1e-2 else ""), flush=True)


if __name__ == "__main__":
    main()
