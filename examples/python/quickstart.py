"""thunder_c quickstart: compile a GPT-2 block (an ordinary nn.Module) with thunder_c.jit, check it
against PyTorch eager, print what thunder-c made of it, and time both.

    PYTHONPATH=build/python .venv/bin/python examples/python/quickstart.py [--batch 8 --seq 256] [--threads N]

Eager is the same as bench/bench_peers.py's: the installed torch running the module itself, with
torch.set_num_threads and thunder_c.set_num_threads at the same count (--threads, default every CPU the
process may use). The first lines say which BLAS torch uses (from torch.__config__.show()) and which
oneDNN thunder-c's GEMMs run on.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import torch

import thunder_c

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_module import Block  # noqa: E402


def timed(fn, x, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(x)
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[0], ts[len(ts) // 2], ts[-1]


def torch_blas():
    """torch's BLAS and oneDNN as torch.__config__.show() names them."""
    cfg = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", cfg)
    dnnl = re.search(r"MKL-DNN (v[0-9.]+)", cfg)
    text = f"BLAS_INFO={blas.group(1) if blas else 'unknown'}"
    if mkl:
        text += f" (Intel MKL {mkl.group(1)})"
    return text + (f", oneDNN (MKL-DNN) {dnnl.group(1)}" if dnnl else ", no oneDNN")


def debian_dnnl():
    """The oneDNN thunder-c is built against: Debian's libdnnl2, when dpkg knows it."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libdnnl2"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout:
            return "oneDNN " + out.stdout.split("-")[0] + " (Debian's libdnnl2)"
    except (OSError, subprocess.SubprocessError):
        pass
    return "oneDNN from Debian (libdnnl)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--full-trace", action="store_true", help="print the initial trace with every subsymbol")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads for both torch and thunder_c (default: every CPU the process may use)")
    args = ap.parse_args()
    if args.threads < 1:
        ap.error("--threads must be positive")
    torch.set_num_threads(args.threads)
    thunder_c.set_num_threads(args.threads)
    print(f"PyTorch eager: torch {torch.__version__}, {torch_blas()}; "
          f"thunder-c: GEMMs on {debian_dnnl()}, fused kernels compiled with $CC; "
          f"{args.threads} threads each")

    torch.manual_seed(0)
    model = Block(n_embd=768, n_head=12, block_size=1024).eval()
    x = torch.randn(args.batch, args.seq, 768)

    jmodel = thunder_c.jit(model)          # an nn.Module sharing model's parameters
    with torch.no_grad():
        y = jmodel(x)                      # first call: trace + compile, then run
        ref = model(x)
    err = (y - ref).abs().max().item()
    print(f"max |thunder_c - eager| = {err:.3g}   (output {tuple(y.shape)} {y.dtype})")

    traces = thunder_c.last_traces(jmodel)
    print("\nThe traces of this compilation, in order:")
    for t in traces:
        print("  -", t.provenance or "initial trace (what the program computes, as recorded)")
    first = str(traces[0]) if args.full_trace else traces[0].python()
    print("\n==== initial trace (top level; --full-trace shows the decompositions) ====\n" + first)
    print("==== execution trace (what runs: prims, linear/matmul on oneDNN) ====\n" + str(traces[-1]))

    with torch.no_grad():
        tj = timed(jmodel, x, args.reps)
        te = timed(model, x, args.reps)
    print(f"forward, batch {args.batch} seq {args.seq}: thunder_c {tj[1]:.1f} ms (min {tj[0]:.1f}, max {tj[2]:.1f}), "
          f"eager {te[1]:.1f} ms (min {te[0]:.1f}, max {te[2]:.1f}); "
          f"cache hits {thunder_c.cache_hits(jmodel)}, misses {thunder_c.cache_misses(jmodel)}")
    return 0 if err < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
