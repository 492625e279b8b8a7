"""PyTorch eager baseline for bench_gpt2: the same GPT-2 block (B8 T256 C768 H12), f32 and bf16, time per
forward, min/median/max over N runs. Run with the project's .venv/bin/python and the same thread count:
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 .venv/bin/python bench/bench_gpt2_torch.py [iters] [--bf16-iters N]
    [--dtypes f32,bf16]
(PyTorch 1.13's bf16 CPU kernels are very slow on AVX2-only CPUs, hence the separate bf16 count.)
Each result is also printed as an "@gpt2 <dtype> torch min median max" line for bench/run_fusion.sh."""
import argparse
import math
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
B, T, C, H = 8, 256, 768, 12
ap = argparse.ArgumentParser()
ap.add_argument("iters", type=int, nargs="?", default=10)
ap.add_argument("--bf16-iters", type=int, default=None, help="iterations for bf16 (default: iters)")
ap.add_argument("--dtypes", default="f32,bf16")
args = ap.parse_args()


def block(x, p):
    h = F.layer_norm(x, (C,), p["ln1w"], p["ln1b"], 1e-5)
    q, k, v = F.linear(h, p["wqkv"], p["bqkv"]).split(C, 2)
    hs = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
    q, k, v = hs(q), hs(k), hs(v)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).tril().logical_not(), float("-inf"))
    y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
    x1 = x + F.linear(y, p["wproj"], p["bproj"])
    h2 = F.layer_norm(x1, (C,), p["ln2w"], p["ln2b"], 1e-5)
    return x1 + F.linear(F.gelu(F.linear(h2, p["wfc"], p["bfc"]), approximate="tanh"), p["wout"], p["bout"])


for dname in args.dtypes.split(","):
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dname]
    iters = args.bf16_iters if dname == "bf16" and args.bf16_iters is not None else args.iters
    shapes = dict(ln1w=(C,), ln1b=(C,), wqkv=(3 * C, C), bqkv=(3 * C,), wproj=(C, C), bproj=(C,), ln2w=(C,),
                  ln2b=(C,), wfc=(4 * C, C), bfc=(4 * C,), wout=(C, 4 * C), bout=(C,))
    p = {k: torch.randn(s, dtype=dtype) * 0.02 for k, s in shapes.items()}
    x = torch.randn(B, T, C, dtype=dtype)
    with torch.no_grad():
        block(x, p)
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            block(x, p)
            ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    med = ts[len(ts) // 2] if len(ts) % 2 else (ts[len(ts) // 2 - 1] + ts[len(ts) // 2]) / 2
    print(f"torch eager gpt2_block {str(dtype)[6:]}: min {ts[0]:.1f} ms  median {med:.1f} ms  max {ts[-1]:.1f} ms")
    print(f"@gpt2 {dname} torch {ts[0]:.4f} {med:.4f} {ts[-1]:.4f} - -", flush=True)
