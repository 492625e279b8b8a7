"""The Python frontend (thunder_c.jit) against PyTorch eager, on the same machine in the same process.

1. Per-call overhead of a cached call on tiny tensors, where the work itself is negligible: a 1-op
   function (x + y) and a 3-op chain ((x + y) * y - x) on f32[4]. After a 1 s warm-up of everything,
   each round times N calls of each row (thunder_c and eager, both functions, interleaved, so drift hits
   every row alike); min/median/max over the rounds, in microseconds per call.
2. A GPT-2 transformer block written as an nn.Module (nanoGPT's: c_attn q/k/v split, causal mask from a
   registered tril buffer via masked_fill, softmax, c_proj, tanh-GELU MLP, two LayerNorms), batch 8,
   seq 256, n_embd 768, 12 heads, forward only under torch.no_grad(), f32 and bf16 (model and input in
   bf16): thunder_c.jit(module) vs the module itself; min/median/max ms per forward and the ratio.

Prints markdown tables. Run (never a timed test):
    PYTHONPATH=build/python .venv/bin/python bench/bench_python.py [--rounds 20] [--calls 10000]
        [--runs 5] [--bf16-runs 3] [--skip-gpt2] [--skip-overhead]
Thread count: torch and thunder-c both use all cores unless OMP_NUM_THREADS is set (torch.set_num_threads
is set to the same value)."""
import argparse
import os
import platform
import statistics
import sys
import time

import torch

import thunder_c


# ---- the GPT-2 block: examples/python/gpt2_module.py ---------------------------------------------------

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
from gpt2_module import Block  # noqa: E402


# ---- timing -------------------------------------------------------------------------------------------------

def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


def time_calls(fn, args, calls):
    """Seconds per call of fn(*args) over `calls` calls (results dropped as they come)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls


def overhead(rounds, calls):
    x, y = torch.randn(4), torch.randn(4)
    cases = [("1 op: x + y", lambda x, y: x + y), ("3 ops: (x + y) * y - x", lambda x, y: (x + y) * y - x)]
    jitted = []
    for name, fn in cases:
        jfn = thunder_c.jit(fn)
        torch.testing.assert_close(jfn(x, y), fn(x, y))
        jitted.append(jfn)
    # warm up everything first (a process's first calls run slower: allocator arenas, caches)
    t_end = time.perf_counter() + 1.0
    while time.perf_counter() < t_end:
        for (name, fn), jfn in zip(cases, jitted):
            time_calls(jfn, (x, y), 1000)
            time_calls(fn, (x, y), 1000)
    th = [[] for _ in cases]
    ea = [[] for _ in cases]
    for _ in range(rounds):  # one of each per round, so drift hits every row alike
        for i, ((name, fn), jfn) in enumerate(zip(cases, jitted)):
            th[i].append(time_calls(jfn, (x, y), calls) * 1e6)
            ea[i].append(time_calls(fn, (x, y), calls) * 1e6)
    rows = []
    for i, ((name, fn), jfn) in enumerate(zip(cases, jitted)):
        assert thunder_c.cache_misses(jfn) == 1
        rows.append((name, mmm(th[i]), mmm(ea[i])))
    print(f"\n### Cached-call overhead, f32[4] inputs, {rounds} rounds x {calls} calls (us per call)\n")
    print("| function | thunder_c min / median / max | eager min / median / max | thunder_c - eager (medians) |")
    print("|---|---|---|---|")
    for name, t, e in rows:
        print(f"| {name} | {t[0]:.2f} / {t[1]:.2f} / {t[2]:.2f} | {e[0]:.2f} / {e[1]:.2f} / {e[2]:.2f} | "
              f"{t[1] - e[1]:+.2f} |")
    return rows


def gpt2(runs_by_dtype, B=8, T=256, C=768, H=12):
    rows = []
    for dtype, runs in runs_by_dtype:
        if runs <= 0:
            continue
        torch.manual_seed(0)
        m = Block(C, H, T).eval().to(dtype)
        x = torch.randn(B, T, C, dtype=dtype)
        tm = thunder_c.jit(m)
        with torch.no_grad():
            t0 = time.perf_counter()
            got = tm(x)  # the first call traces and compiles
            compile_ms = (time.perf_counter() - t0) * 1e3
            want = m(x)
            tol = 1e-3 if dtype == torch.float32 else 1e-1
            torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
            th, ea = [], []
            for _ in range(runs):  # interleaved: one of each per round
                th.append(time_calls(tm, (x,), 1) * 1e3)
                ea.append(time_calls(m, (x,), 1) * 1e3)
        assert thunder_c.cache_misses(tm) == 1
        rows.append((str(dtype).replace("torch.", ""), runs, compile_ms, mmm(th), mmm(ea)))
    print(f"\n### GPT-2 block forward (nn.Module), B={B} T={T} n_embd={C} heads={H}, no_grad (ms per forward)\n")
    print("| dtype | runs | thunder_c min / median / max | eager min / median / max | eager / thunder_c (medians) "
          "| (of mins) | first call (trace + compile + run) |")
    print("|---|---|---|---|---|---|---|")
    for name, runs, cms, t, e in rows:
        print(f"| {name} | {runs} | {t[0]:.1f} / {t[1]:.1f} / {t[2]:.1f} | {e[0]:.1f} / {e[1]:.1f} / {e[2]:.1f} | "
              f"{e[1] / t[1]:.2f}x | {e[0] / t[0]:.2f}x | {cms:.0f} ms |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5, help="GPT-2 f32 forwards per side")
    ap.add_argument("--bf16-runs", type=int, default=3, help="GPT-2 bf16 forwards per side (eager bf16 is slow on CPU)")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-gpt2", action="store_true")
    a = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    print(f"torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{threads} threads, {platform.processor() or platform.machine()}")
    if not a.skip_overhead:
        overhead(a.rounds, a.calls)
    if not a.skip_gpt2:
        gpt2([(torch.float32, a.runs), (torch.bfloat16, a.bf16_runs)])


if __name__ == "__main__":
    main()
