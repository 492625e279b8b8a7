"""thunder_c quickstart: compile a GPT-2 block (an ordinary nn.Module) with thunder_c.jit, check it
against PyTorch eager, print what thunder-c made of it, and time both.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/quickstart.py [--batch 8 --seq 256]
"""
import argparse
import os
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--full-trace", action="store_true", help="print the initial trace with every subsymbol")
    args = ap.parse_args()

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
