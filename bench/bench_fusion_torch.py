"""PyTorch eager baseline for bench_fusion: the same memory-bound workloads, f32 and bf16,
min / median / max ms over interleaved rounds, next to torch's own read-once/write-once floor
(`out.copy_(x)` into a preallocated tensor of x's size, measured in the same rounds).

  gelu_tanh   F.gelu(x * 2 + 1, approximate="tanh"), x [16777216]
  bias_gelu   F.gelu(x + b, approximate="tanh"), x [8192, 3072], b [3072]
  softmax     torch.softmax(x, -1), x [8192, 1024]
  layer_norm  F.layer_norm(x, (1024,), w, b, 1e-5), x [8192, 1024]
  rms_norm    x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w, x [8192, 1024]

Run with the project's .venv/bin/python and the thread count of the C side:
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 .venv/bin/python bench/bench_fusion_torch.py [--rounds N]
Prints a markdown table, then "@row" lines that bench/run_fusion.sh combines with bench_fusion's."""
import argparse
import time

import torch
import torch.nn.functional as F


def workloads():
    """(name, shape, parameter shapes and value ranges, function) per workload, as bench_fusion.c."""
    return [
        ("gelu_tanh", (16777216,), [], (-2.0, 2.0), lambda x: F.gelu(x * 2 + 1, approximate="tanh")),
        ("bias_gelu", (8192, 3072), [("b", (-0.5, 0.5))], (-3.0, 3.0),
         lambda x, b: F.gelu(x + b, approximate="tanh")),
        ("softmax", (8192, 1024), [], (-4.0, 4.0), lambda x: torch.softmax(x, -1)),
        ("layer_norm", (8192, 1024), [("w", (0.5, 1.5)), ("b", (-0.5, 0.5))], (-2.0, 2.0),
         lambda x, w, b: F.layer_norm(x, (1024,), w, b, 1e-5)),
        ("rms_norm", (8192, 1024), [("w", (0.5, 1.5))], (-2.0, 2.0),
         lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w),
    ]


def uniform(shape, lo, hi, dtype, gen):
    return (torch.rand(shape, generator=gen) * (hi - lo) + lo).to(dtype)


def stats(ts):
    ts = sorted(ts)
    n = len(ts)
    med = ts[n // 2] if n % 2 else (ts[n // 2 - 1] + ts[n // 2]) / 2
    return ts[0], med, ts[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    only = set(a.only.split(",")) if a.only else None
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    print(f"bench_fusion_torch: torch {torch.__version__}, {torch.get_num_threads()} threads, {a.rounds} rounds\n")
    print("| workload | dtype | row | min / median / max ms | GB/s | /copy |")
    print("|---|---|---|---|---|---|")
    lines = []
    gen = torch.Generator().manual_seed(0)
    for dn in a.dtypes.split(","):
        dt = dtypes[dn]
        for name, shape, params, (lo, hi), fn in workloads():
            if only and name not in only:
                continue
            x = uniform(shape, lo, hi, dt, gen)
            ps = [uniform((shape[-1],), plo, phi, dt, gen) for _, (plo, phi) in params]
            nbytes = (x.numel() * 2 + sum(p.numel() for p in ps)) * x.element_size()
            dst = torch.empty_like(x)
            dst.copy_(x)
            rows = {"torch_copy": [], "torch": []}
            with torch.no_grad():
                for r in range(-1, a.rounds):  # round -1 warms up
                    t0 = time.perf_counter()
                    dst.copy_(x)
                    t1 = time.perf_counter()
                    out = fn(x, *ps)
                    t2 = time.perf_counter()
                    del out
                    if r >= 0:
                        rows["torch_copy"].append((t1 - t0) * 1e3)
                        rows["torch"].append((t2 - t1) * 1e3)
            floor_med = stats(rows["torch_copy"])[1]
            for row, label in (("torch_copy", "copy_ (floor)"), ("torch", "eager")):
                mn, med, mx = stats(rows[row])
                print(f"| {name} | {dn} | {label} | {mn:.2f} / {med:.2f} / {mx:.2f} | {nbytes / (med * 1e6):.1f} | "
                      f"{med / floor_med:.2f}x |")
                lines.append(f"@row {name} {dn} {row} {mn:.4f} {med:.4f} {mx:.4f} {nbytes} -")
            del x, ps, dst
    print("\nFigures for bench/run_fusion.sh:\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
