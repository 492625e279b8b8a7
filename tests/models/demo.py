"""One zoo model (zoo.py) through thunder_c.jit: checked against eager, its traces printed, and its eval
forward and train step timed against eager and torch.compile (inductor).

    scripts/demo.sh --model NAME [--reps 5] [--full-trace] [--no-compile]
    PYTHONPATH=build/python .venv/bin/python tests/models/demo.py NAME ...

Names: every spec of zoo.py (gpt2, llama, nanogpt, llama2c, transformer_encoder, lstm, resnet18, ...).
A model thunder_c cannot run yet stops with the error naming what is missing.
"""
import argparse
import os
import pathlib
import sys
import time
import warnings

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "build" / "python"))

import torch  # noqa: E402

import report  # noqa: E402
import runner  # noqa: E402
import zoo  # noqa: E402


def train_step_fn(spec, model, batch):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the step's cost without changing the model

    def step():
        opt.zero_grad(set_to_none=True)
        spec.loss(model, batch).backward()
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=[s.name for s in zoo.SPECS], metavar="NAME")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--full-trace", action="store_true", help="print the initial trace with every subsymbol")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import thunder_c
    spec = zoo.get(args.name)
    if spec.skip:
        print(f"{spec.name}: skipped: {spec.skip}")
        return 0
    print(f"{spec.name} ({spec.family}); {report.cpu_model()}, {torch.get_num_threads()} threads; "
          f"torch {torch.__version__}")
    for mode in runner.modes(spec):
        try:
            err = runner.check(spec, mode)
            print(f"  {mode:8s} matches eager (max error {err:.2g})")
        except Exception as e:  # noqa: BLE001
            print(f"  {mode:8s} FAILS: {runner.reason(e)}")
    model = spec.build().eval()
    batch = spec.batch()
    jm = thunder_c.jit(model)
    try:
        with torch.no_grad():
            spec.forward(jm, batch)
    except Exception as e:  # noqa: BLE001
        print(f"\nthunder_c cannot run {spec.name} yet: {runner.reason(e)}")
        return 1
    traces = thunder_c.last_traces(jm)
    first = str(traces[0]) if args.full_trace else traces[0].python()
    print("\n==== initial trace (top level; --full-trace shows the decompositions) ====\n" + first)
    print("==== execution trace (what runs) ====\n" + str(traces[-1]))

    rows = []
    with torch.no_grad():
        fwd = {"eager": lambda: spec.forward(model, batch), "thunder_c": lambda: spec.forward(jm, batch)}
        if not args.no_compile:
            cm = torch.compile(model)
            fwd["torch.compile"] = lambda: spec.forward(cm, batch)
        for k, f in fwd.items():
            t0 = time.perf_counter()
            try:
                f()
            except Exception as e:  # noqa: BLE001
                rows.append(("eval forward", k, None, runner.reason(e)))
                continue
            first_ms = (time.perf_counter() - t0) * 1e3
            rows.append(("eval forward", k, report.timed(f, args.reps), first_ms))
    tmodel = spec.build().train()
    tj = thunder_c.jit(tmodel)
    steps = {"eager": train_step_fn(spec, tmodel, batch), "thunder_c": train_step_fn(spec, tj, batch)}
    if not args.no_compile:
        steps["torch.compile"] = train_step_fn(spec, torch.compile(tmodel), batch)
    for k, f in steps.items():
        t0 = time.perf_counter()
        try:
            f()
        except Exception as e:  # noqa: BLE001
            rows.append(("train step", k, None, runner.reason(e)))
            continue
        first_ms = (time.perf_counter() - t0) * 1e3
        rows.append(("train step", k, report.timed(f, args.reps), first_ms))
    print(f"{'':14s}{'':15s}{'median ms':>10s}{'min ms':>10s}{'first call ms':>15s}")
    for what, k, t, first_ms in rows:
        if t is None:
            print(f"{what:14s}{k:15s}  failed: {first_ms}")
        else:
            print(f"{what:14s}{k:15s}{t[1]:10.2f}{t[0]:10.2f}{first_ms:15.1f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
