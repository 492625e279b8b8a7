"""The training benchmark: one GPT-2 block (examples/python/gpt2_module.py: nanoGPT's Block,
B=8 T=256 n_embd=768 12 heads by default) forward + backward, thunder_c.jit(block) vs PyTorch
eager, next to the GEMM floor measured in the same run.

One training step's compute is timed: `out = block(x); out.backward(cot)` with x requiring grad (the
block as one layer of a stack) and a fixed random cotangent `cot` (the same as `(out * cot).sum()
.backward()`, without the extra elementwise ops outside the block); parameter and input gradients are
reset to None between steps, outside the timed region. Both sides use the same module (the jitted one
shares its parameters), input and cotangent. Modes:
  f32   everything float32;
  bf16  `torch.autocast('cpu', dtype=torch.bfloat16)` around the forward (AMP: bf16 matmuls, f32
        parameters and f32 gradients for them); the backward runs outside the autocast region.
Per round one thunder-c step and one eager step (their order alternating between rounds) and one GEMM
for the floor; the first call of each side (thunder-c: trace + compile of forward and backward + run)
is excluded and reported separately. min / median / max ms over the rounds.

GEMM floor = the FLOPs of the block's forward and backward matmuls / the best GEMM rate measured in
this run. Forward GEMM FLOPs, M = B*T: qkv 2*M*C*3C, attention q@k^T 2*B*T*T*C, att@v 2*B*T*T*C, proj
2*M*C*C, fc 2*M*C*4C, fc_proj 2*M*4C*C; the backward computes two GEMMs of the same size per forward GEMM
(input and weight gradients), so forward + backward = 3x the forward's. The rate: torch.matmul on the
MLP's first GEMM ([M, C] @ [C, 4C]), best of the rounds; for bf16 whichever of a bf16 and an f32
torch.matmul is faster on this CPU (probed once at start: without AVX-512 BF16 / AMX, oneDNN 2.6 has
no native bf16 matmul and PyTorch 1.13's bf16 CPU GEMM is much slower than f32, so the f32 GEMM is the
floor of the widening path thunder-c takes there).

Run (never a timed test):
    PYTHONPATH=build/python .venv/bin/python bench/bench_gpt2_train.py [--iters 10] [--bf16-iters N]
        [--eager-bf16-iters N] [--dtypes f32,bf16] [--batch 8] [--seq 256] [--embd 768] [--heads 12]
        [--threads 2] [--executors fuser,blas,eager]
PyTorch 1.13's eager bf16 autocast step is very slow on AVX2-only CPUs (its bf16 GEMMs), hence the
separate --eager-bf16-iters (0 skips the eager bf16 row).
"""
import argparse
import os
import sys

_ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
_ap.add_argument("--iters", type=int, default=10, help="timed rounds per dtype")
_ap.add_argument("--bf16-iters", type=int, default=None, help="rounds for bf16 (default: --iters)")
_ap.add_argument("--eager-bf16-iters", type=int, default=None,
                 help="eager steps in the bf16 rounds (default: all; 0 = no eager bf16 row)")
_ap.add_argument("--dtypes", default="f32,bf16")
_ap.add_argument("--batch", type=int, default=8)
_ap.add_argument("--seq", type=int, default=256)
_ap.add_argument("--embd", type=int, default=768)
_ap.add_argument("--heads", type=int, default=12)
_ap.add_argument("--threads", type=int, default=2, help="threads for both sides (default 2)")
_ap.add_argument("--executors", default=None, help="thunder_c executors, comma-separated (default: thunder_c's)")
ARGS = _ap.parse_args()
# Before torch / thunder_c load their OpenMP runtime, so both thread pools get the same size.
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))

import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from bench_host import cpu_flags  # noqa: E402

import thunder_c  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
from gpt2_module import Block  # noqa: E402


def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


def gemm_flops_fwd(B, T, C):
    M = B * T
    return {"qkv": 2 * M * C * 3 * C, "q@k^T": 2 * B * T * T * C, "att@v": 2 * B * T * T * C,
            "proj": 2 * M * C * C, "fc": 2 * M * C * 4 * C, "fc_proj": 2 * M * 4 * C * C}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Gemm:
    """torch.matmul of [M, K] @ [K, N] in a dtype, operands allocated once; time() -> seconds per call."""

    def __init__(self, M, K, N, dtype):
        self.a = torch.randn(M, K).to(dtype)
        self.b = torch.randn(K, N).to(dtype)
        self.flops = 2 * M * K * N
        self.dtype = dtype
        torch.matmul(self.a, self.b)  # warm-up

    def time(self):
        t0 = time.perf_counter()
        torch.matmul(self.a, self.b)
        return time.perf_counter() - t0


def pick_gemm(dname, M, C):
    """The GEMM the floor is measured with: f32 for f32; for bf16 the faster of bf16 and f32 torch.matmul,
    probed on a small shape (the bf16 GEMM can be far slower here, so never on the full one first)."""
    f32 = Gemm(M, C, 4 * C, torch.float32)
    if dname == "f32":
        return f32, "torch.matmul f32"
    probe_m = max(1, min(M, 256))
    rates = {}
    for dt in (torch.bfloat16, torch.float32):
        g = Gemm(probe_m, C, C, dt)
        rates[dt] = max(g.flops / g.time() for _ in range(3))
    flags = cpu_flags()
    native = bool(flags & {"avx512_bf16", "amx_bf16"})
    note = (f"bf16 torch.matmul probe {rates[torch.bfloat16] / 1e9:.1f} GFLOP/s vs f32 "
            f"{rates[torch.float32] / 1e9:.1f} GFLOP/s ([{probe_m}, {C}] @ [{C}, {C}]); CPU "
            + ("has AVX-512 BF16/AMX" if native else "has no AVX-512 BF16 / AMX: oneDNN 2.6 has no native bf16 "
               "matmul here (thunder-c widens bf16 GEMMs to f32)"))
    if rates[torch.bfloat16] > rates[torch.float32]:
        return Gemm(M, C, 4 * C, torch.bfloat16), "torch.matmul bf16 (faster here); " + note
    return f32, "torch.matmul f32 (faster than bf16 here); " + note


def run_dtype(dname, iters, eager_iters, B, T, C, H, executors):
    torch.manual_seed(0)
    block = Block(C, H, T).train()  # dropout 0.0: train() changes nothing but the cache key's flag
    x = torch.randn(B, T, C, requires_grad=True)
    params = [p for p in block.parameters()]
    jblock = thunder_c.jit(block, executors=executors)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dname == "bf16" else None

    def step(m):
        for p in params:
            p.grad = None
        x.grad = None
        t0 = time.perf_counter()
        if ctx is None:
            out = m(x)
        else:
            with ctx():
                out = m(x)
        out.backward(cot)
        return (time.perf_counter() - t0) * 1e3, out

    # out has x's dtype in both modes (under autocast the residual adds promote back to f32)
    cot = torch.randn(B, T, C)

    # first calls: thunder-c traces and compiles forward and backward; eager warms its allocator
    th_first, out_th = step(jblock)
    g_th = [x.grad.clone()] + [p.grad.clone() for p in params]
    ea_first, out_ea = (step(block) if eager_iters > 0 else (float("nan"), None))
    diff = float("nan")
    if out_ea is not None:
        g_ea = [x.grad.clone()] + [p.grad.clone() for p in params]
        # sanity only (not a test): the largest gradient difference relative to the gradient's scale
        diff = max(float((a - b).abs().max() / (b.abs().max() + 1e-30)) for a, b in zip(g_th, g_ea))
        assert out_th.dtype == out_ea.dtype, (out_th.dtype, out_ea.dtype)
    del out_th, out_ea

    gemm, gemm_desc = pick_gemm(dname, B * T, C)
    th, ea, gm = [], [], []
    for r in range(iters):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for who in order:
            if who == 0:
                th.append(step(jblock)[0])
            elif len(ea) < eager_iters:
                ea.append(step(block)[0])
        gm.append(gemm.time())
    misses = thunder_c.cache_misses(jblock._thunder_jit)
    fwd = gemm_flops_fwd(B, T, C)
    flops = 3 * sum(fwd.values())
    floors = [flops / (gemm.flops / s) * 1e3 for s in gm]  # ms, one per round
    return dict(dname=dname, iters=iters, th=th, ea=ea, floors=floors, th_first=th_first, ea_first=ea_first,
                diff=diff, gemm_desc=gemm_desc, best_rate=gemm.flops / min(gm), flops=flops, fwd=fwd,
                misses=misses)


def report(r, B, T, C, H):
    name = {"f32": "f32", "bf16": "bf16 autocast"}[r["dname"]]
    floor = min(r["floors"])  # FLOPs at the best GEMM rate of the run
    print(f"\n### GPT-2 block forward + backward, {name}, B={B} T={T} n_embd={C} heads={H}, {r['iters']} rounds\n")
    print(f"Block GEMM FLOPs: forward {sum(r['fwd'].values()) / 1e9:.2f} GFLOP ("
          + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in r["fwd"].items())
          + f"), forward + backward {r['flops'] / 1e9:.2f} GFLOP. GEMM: {r['gemm_desc']}; best "
          f"{r['best_rate'] / 1e9:.1f} GFLOP/s on [{B * T}, {C}] @ [{C}, {4 * C}] -> floor {floor:.1f} ms.\n")
    print("| row | min ms | median ms | max ms | / floor (median) | / floor (min) | speedup vs eager (medians) "
          "| (of mins) |")
    print("|---|---|---|---|---|---|---|---|")
    e = mmm(r["ea"]) if r["ea"] else None
    rows = [("thunder-c", mmm(r["th"])), ("eager", e), ("GEMM floor", mmm(r["floors"]))]
    for label, m in rows:
        if m is None:
            print(f"| {label} | — | — | — | — | — | — | — |")
            continue
        sp = f"{e[1] / m[1]:.2f}x | {e[0] / m[0]:.2f}x" if e else "— | —"
        print(f"| {label} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.1f} | {m[1] / floor:.2f}x | {m[0] / floor:.2f}x | {sp} |")
    ea_first = f"{r['ea_first']:.0f} ms" if e else "skipped"
    diff = (f"Largest |grad thunder-c - grad eager| / max|grad eager| over x and the parameters: {r['diff']:.2e} "
            f"(sanity check, not a test). ") if e else ""
    print(f"\nFirst call (excluded above): thunder-c {r['th_first']:.0f} ms (trace + compile of forward and "
          f"backward + run), eager {ea_first}. thunder-c cache misses: {r['misses']}. {diff}"
          f"Target: thunder-c median within 1.25x of the floor.")
    print(f"@train {r['dname']} thunder-c {' '.join(f'{v:.3f}' for v in mmm(r['th']))}")
    if e:
        print(f"@train {r['dname']} eager {' '.join(f'{v:.3f}' for v in e)}")
    print(f"@train {r['dname']} floor {floor:.3f}", flush=True)


def main():
    a = ARGS
    if min(a.iters, a.batch, a.seq, a.embd, a.heads, a.threads) < 1 or a.embd % a.heads:
        _ap.error("--iters/--batch/--seq/--embd/--heads/--threads must be positive, --embd a multiple of --heads")
    torch.set_num_threads(a.threads)
    execs = a.executors.split(",") if a.executors else None
    print(f"torch {torch.__version__}, Python {platform.python_version()}, {cpu_name()}, {os.cpu_count()} CPUs, "
          f"{a.threads} threads (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}), load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}, thunder_c executors {execs or 'default'}")
    for dname in a.dtypes.split(","):
        if dname not in ("f32", "bf16"):
            _ap.error(f"--dtypes: expected f32 and/or bf16, but got {dname!r}")
        iters = a.bf16_iters if dname == "bf16" and a.bf16_iters is not None else a.iters
        eager_iters = iters
        if dname == "bf16" and a.eager_bf16_iters is not None:
            eager_iters = min(iters, a.eager_bf16_iters)
        r = run_dtype(dname, iters, eager_iters, a.batch, a.seq, a.embd, a.heads, execs)
        report(r, a.batch, a.seq, a.embd, a.heads)
    print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
