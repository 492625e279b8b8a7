"""thunder_c under a loaded machine: a llama2.c forward (the stories15M shape, batch 1) through
thunder_c.jit and PyTorch eager, on an idle machine and with a fixed background load of busy
processes, side by side in one run.

    PYTHONPATH=build/python .venv/bin/python bench/bench_load.py [--load 4] [--rounds 5] [--calls 20]

Each row is ms per call, min / median / max over the rounds' per-call means; the load rows start
--load processes that spin in a loop (each wants a whole CPU) before timing and stop them after.
The ratio columns are each peer's loaded median over its idle median: how much it degrades. The
thunder_c row runs on the default thread count (THUNDER_NUM_THREADS=--threads), which each run caps
by the CPUs other processes leave free; the set_num_threads row sets the same count explicitly, which
thunder_c uses as given.
"""
import argparse
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import bench_host  # noqa: E402


def spinners(n):
    """Starts n child processes that spin until killed; returns their pids."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:  # the child: spin, never return into the benchmark
            try:
                x = 0
                while True:
                    x += 1
            finally:
                os._exit(0)
        pids.append(pid)
    time.sleep(0.5)  # let the scheduler spread them
    return pids


def stop(pids):
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)


def time_calls(fn, x, rounds, calls):
    fn(x)
    means = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        means.append((time.perf_counter() - t0) / calls * 1e3)
    return means


def mmm(xs):
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=int, default=4, help="busy background processes in the loaded rows (default 4)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20, help="calls per round")
    ap.add_argument("--threads", type=int, default=None, help="threads for torch and thunder_c (default: the CPUs)")
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args(argv)

    import thunder_c
    import llama2c

    nthreads = a.threads or os.cpu_count()
    torch.set_num_threads(nthreads)
    os.environ["THUNDER_NUM_THREADS"] = str(nthreads)  # the default count, which adapts to the load
    torch.manual_seed(0)
    m = llama2c.Transformer(llama2c.ModelArgs(dim=288, n_layers=6, n_heads=6, n_kv_heads=6, vocab_size=512,
                                              multiple_of=32, max_seq_len=256)).eval()
    ids = torch.randint(0, 512, (1, a.seq))
    jm = thunder_c.jit(m)
    with torch.no_grad():
        want, got = m(ids), jm(ids)
        err = (got - want).abs().max().item()
        def fixed(x):  # the same count, set explicitly: used as given, whatever the load
            thunder_c.set_num_threads(nthreads)
            try:
                return jm(x)
            finally:
                thunder_c.set_num_threads(0)

        peers = {"eager": m, "thunder_c": jm, f"thunder_c, set_num_threads({nthreads})": fixed}
        rows = {}
        for load in (0, a.load):
            pids = spinners(load) if load else []
            try:
                for name, fn in peers.items():
                    rows[(name, load)] = time_calls(fn, ids, a.rounds, a.calls)
            finally:
                stop(pids)

    print(f"# {bench_host.cpu_line()}, {nthreads} thread(s); torch {torch.__version__}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    print(f"# llama2.c forward, dim 288, 6 layers, batch 1, seq {a.seq}; max |thunder_c - eager| {err:.2g}")
    print(f"| peer | idle (ms: min / median / max) | {a.load} busy processes | loaded / idle (medians) |")
    print("|---|---|---|---|")
    for name in peers:
        idle, busy = rows[(name, 0)], rows[(name, a.load)]
        print(f"| {name} | {mmm(idle)} | {mmm(busy)} | {statistics.median(busy) / statistics.median(idle):.2f}x |")


if __name__ == "__main__":
    main()
