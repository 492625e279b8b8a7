"""What a new input shape costs a jitted model: its first call, then one call at each new (batch,
sequence length), each a cache miss (thunder_c.compile_stats says why), against eager's values.

    PYTHONPATH=build/python .venv/bin/python bench/bench_new_shapes.py [--models nanogpt,llama,gpt2]

Run it with an empty kernel cache (XDG_CACHE_HOME=$(mktemp -d)) to see which misses compile C: a miss
that only retraces and re-plans costs milliseconds, one that compiles kernels costs about a second.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import bench_host  # noqa: E402

SHAPES = ((2, 16), (3, 16), (2, 17), (2, 24), (4, 30))


def ms(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="nanogpt,llama,gpt2", help="zoo models (tests/models/zoo.py)")
    ap.add_argument("--no-train", action="store_true", help="leave out the nanoGPT train step")
    a = ap.parse_args(argv)
    import thunder_c
    import zoo

    print(f"# {bench_host.cpu_line()}; torch {torch.__version__}; XDG_CACHE_HOME={os.environ.get('XDG_CACHE_HOME', '(unset)')}")
    print("| model | " + " | ".join(f"{b}x{t}" for b, t in SHAPES) + " |")
    print("|---|" + "---|" * len(SHAPES))
    runs = [(name, False) for name in a.models.split(",") if name] + ([] if a.no_train else [("nanogpt", True)])
    for name, train in runs:
        spec = zoo.get(name)
        torch.manual_seed(0)
        m = spec.build().train(train)
        jm = thunder_c.jit(m)
        cells = []
        for b, t in SHAPES:
            ids = torch.randint(0, zoo.VOCAB, (b, t))
            batch = {"ids": ids, "targets": ids}
            if train:
                _, dt = ms(lambda: spec.loss(jm, batch).backward())
                err = (spec.loss(jm, batch) - spec.loss(m, batch)).abs().item()
            else:
                with torch.no_grad():
                    out, dt = ms(lambda: spec.forward(jm, batch))
                    err = (out - spec.forward(m, batch)).abs().max().item()
            cells.append(f"{dt:.1f} ms (err {err:.1g})")
        print(f"| {name}{' train step' if train else ' forward'} | " + " | ".join(cells) + " |")
    print("Each cell: the first call at that shape (a miss); err: the largest difference from eager.")


if __name__ == "__main__":
    main()
