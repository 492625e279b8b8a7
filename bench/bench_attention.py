"""Fused attention: F.scaled_dot_product_attention(q, k, v, is_causal=True) with q, k, v [B, H, T, D],
forward and forward + backward, side by side in one process:
  eager        PyTorch eager's CPU sdpa (its flash kernel)
  thunder_c    thunder_c.jit: prims.scaled_dot_product_flash_attention (and its backward prim)
  decomposed   thunder_c.jit with THUNDER_SDPA_FLASH=0 while tracing: matmul, fused scale / mask /
               softmax region, matmul (the T x T scores materialized)
Rows: float32 and bfloat16, fwd (under no_grad) and fwd+bwd (out.backward(cot), q, k, v requiring grad).
Each round times --iters calls per peer (peers in rotated order); min / median / max per call over the
rounds, in ms. thunder_c's outputs (and gradients) are checked against eager's first.

Usage: .venv/bin/python bench/bench_attention.py [--B 8] [--H 12] [--T 256] [--D 64] [--rounds 5]
       [--iters 3] [--threads N]   (PYTHONPATH=build/python, or THUNDER_BUILD_DIR)"""
import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

build = pathlib.Path(os.environ.get("THUNDER_BUILD_DIR", pathlib.Path(__file__).resolve().parents[1] / "build"))
sys.path.insert(0, str(build / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import thunder_c  # noqa: E402


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for ln in out.splitlines():
            if ln.startswith("Model name:"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def make_peers():
    fused = thunder_c.jit(sdpa)
    decomposed = thunder_c.jit(sdpa)
    return {"eager": sdpa, "thunder_c": fused, "decomposed": decomposed}


def first_call(name, fn, args):
    """The first call traces; the decomposed peer traces with the fused path switched off."""
    if name != "decomposed":
        return fn(*args)
    old = os.environ.get("THUNDER_SDPA_FLASH")
    os.environ["THUNDER_SDPA_FLASH"] = "0"
    try:
        return fn(*args)
    finally:
        if old is None:
            del os.environ["THUNDER_SDPA_FLASH"]
        else:
            os.environ["THUNDER_SDPA_FLASH"] = old


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--H", type=int, default=12)
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    print(f"# bench_attention: B={a.B} H={a.H} T={a.T} D={a.D} causal, {a.threads} threads, CPU: {cpu_model()}, "
          f"torch {torch.__version__}")
    print(f"{'row':<20} {'peer':<11} {'min ms':>9} {'median':>9} {'max':>9}  {'vs eager':>8}")
    for dtype, dn in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        g = torch.Generator().manual_seed(0)
        q, k, v, cot = (torch.randn(a.B, a.H, a.T, a.D, generator=g).to(dtype) for _ in range(4))
        for mode in ("fwd", "fwd+bwd"):
            peers = make_peers()
            if mode == "fwd":
                def call(fn):
                    with torch.no_grad():
                        return fn(q, k, v)
            else:
                qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))

                def call(fn):
                    out = fn(qs, ks, vs)
                    out.backward(cot)
                    res = (out.detach(), qs.grad, ks.grad, vs.grad)
                    qs.grad = ks.grad = vs.grad = None
                    return res
            ref = None
            for name, fn in peers.items():
                r = first_call(name, lambda *_: call(fn), ())
                r = r if isinstance(r, tuple) else (r,)
                if ref is None:
                    ref = r
                    continue
                tol = 1e-4 if dtype == torch.float32 else 5e-2
                for x, y in zip(r, ref):
                    scale = y.float().abs().max().item() or 1.0
                    err = (x.float() - y.float()).abs().max().item() / scale
                    if err > tol:
                        print(f"# {dn} {mode} {name}: MISMATCH vs eager (max error {err:.3g} of max |eager|)")
            times = {n: [] for n in peers}
            names = list(peers)
            for rnd in range(a.rounds):
                order = names[rnd % len(names):] + names[: rnd % len(names)]
                for n in order:
                    t0 = time.perf_counter()
                    for _ in range(a.iters):
                        call(peers[n])
                    times[n].append((time.perf_counter() - t0) / a.iters * 1e3)
            med_eager = statistics.median(times["eager"])
            for n in names:
                ts = times[n]
                med = statistics.median(ts)
                print(f"{dn + ' ' + mode:<20} {n:<11} {min(ts):9.2f} {med:9.2f} {max(ts):9.2f}  {med / med_eager:7.2f}x")


if __name__ == "__main__":
    main()
