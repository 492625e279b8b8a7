"""Fused powers against eager PyTorch and thunder-c's unfused executors, same process.

Rows: minGPT's NewGELU (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 torch.pow(x, 3.0))))) on [256, 512]
and [8, 256, 3072], in float32 and bfloat16; x ** 2.5 (a non-integer constant: the vectorized pow) and
x ** y (a tensor exponent) in float32 on [256, 512]. Each round times N calls of each row, interleaved;
min/median/max ms per call over the rounds. Prints a markdown table. Run (never a timed test):
    PYTHONPATH=build/python .venv/bin/python bench/bench_pow.py [--rounds 5] [--calls 50]"""
import argparse
import math
import statistics
import subprocess
import time

import torch

import thunder_c


def new_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def pow_const(x):
    return torch.pow(x, 2.5) * 2.0


def pow_tensor(x, y):
    return torch.pow(x, y) + 1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for shape in ([256, 512], [8, 256, 3072]):
        for dt in (torch.float32, torch.bfloat16):
            x = torch.randn(shape).to(dt)
            rows.append((f"NewGELU {list(shape)} {str(dt)[6:]}", new_gelu, (x,)))
    x = torch.rand(256, 512) + 0.5
    rows.append(("x ** 2.5 [256, 512] float32", pow_const, (x,)))
    rows.append(("x ** y [256, 512] float32", pow_tensor, (x, torch.randn(256, 512))))
    impls = [("eager torch", lambda f: f), ("thunder-c fused", lambda f: thunder_c.jit(f)),
             ("thunder-c unfused", lambda f: thunder_c.jit(f, executors=["blas", "eager"]))]
    fns = [[mk(f) for _, mk in impls] for _, f, _ in rows]
    for (name, f, args), fs in zip(rows, fns):
        ref = f(*args)
        for g in fs[1:]:
            torch.testing.assert_close(g(*args), ref, atol=1e-2 if ref.dtype == torch.bfloat16 else 1e-5, rtol=1.6e-2 if ref.dtype == torch.bfloat16 else 1e-5)
    times = [[[] for _ in impls] for _ in rows]
    for _ in range(a.rounds):
        for r, ((name, f, args), fs) in enumerate(zip(rows, fns)):
            for k, g in enumerate(fs):
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    g(*args)
                times[r][k].append((time.perf_counter() - t0) / a.calls * 1e3)
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True)
    print(f"CPU: {cpu.stdout.strip()}, torch threads {torch.get_num_threads()}\n")
    print("| workload | " + " | ".join(n + " ms min/med/max" for n, _ in impls) + " |")
    print("|---|" + "---|" * len(impls))
    for (name, _, _), ts in zip(rows, times):
        cells = ["%.3f / %.3f / %.3f" % (min(t), statistics.median(t), max(t)) for t in ts]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
