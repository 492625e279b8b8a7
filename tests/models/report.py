"""Runs the model zoo (zoo.py) and writes what it finds.

    PYTHONPATH=build/python .venv/bin/python tests/models/report.py [--update-failures] [--doc docs/models.md]
        [--models a,b] [--reps 20] [--threads 1] [--no-timing] [--no-compile]

--update-failures  rewrites tests/models/failures.json: per model and mode (forward, train, bf16) the
                   failure runner.reason() gives (the missing op, as thunder_c's NotImplementedError names
                   it), which test_models.py turns into strict xfails.
--doc PATH         writes the table of docs/models.md: per model whether thunder_c.jit and the
                   torch.compile backend (thunder_c.dynamo.ThunderCompiler, "n/a" when it is not there)
                   run its eval forward and its train step, the largest error against eager, the eval
                   forward's time against eager and against torch.compile (inductor) as min/median over
                   --reps calls after a warm-up, the first call's time (trace + compile), and what blocks
                   it. The header names the CPU, the thread count and the versions. --threads sets
                   torch's and thunder_c's thread counts alike (default 1: on a loaded machine one
                   thread each gives the steadiest comparison).
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time
import warnings

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "build" / "python"))

import torch  # noqa: E402

import runner  # noqa: E402
import zoo  # noqa: E402


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def backend():
    """thunder_c.dynamo.ThunderCompiler as a compile function, or None when it is not available."""
    try:
        from thunder_c.dynamo import ThunderCompiler
    except ImportError:
        return None

    def compile_fn(model):
        return torch.compile(model, backend=ThunderCompiler())
    return compile_fn


def attempt(spec, mode, compile=runner.thunder_jit):
    try:
        return True, runner.check(spec, mode, compile)
    except Exception as e:  # noqa: BLE001  (every failure is a row of the report)
        return False, runner.reason(e)


def timed(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts), statistics.median(ts)


def timings(spec, reps, with_inductor):
    """(eager, thunder_c, torch.compile) eval-forward (min, median) ms, and thunder_c's first call (ms)."""
    import thunder_c
    model = spec.build().eval()
    batch = spec.batch()
    out = {}
    with torch.no_grad():
        jm = thunder_c.jit(model)
        t0 = time.perf_counter()
        spec.forward(jm, batch)
        out["first"] = (time.perf_counter() - t0) * 1e3
        spec.forward(model, batch)
        out["eager"] = timed(lambda: spec.forward(model, batch), reps)
        out["thunder_c"] = timed(lambda: spec.forward(jm, batch), reps)
        if with_inductor:
            try:
                cm = torch.compile(model)
                spec.forward(cm, batch)
                out["inductor"] = timed(lambda: spec.forward(cm, batch), reps)
            except Exception as e:  # noqa: BLE001
                out["inductor_error"] = runner.reason(e)
    return out


def ratio(a, b):
    """thunder_c's time over the other's, by their minima (the least disturbed by other load), with
    each side's min/median in ms."""
    return f"{a[0] / b[0]:.2f} ({a[0]:.2f}/{a[1]:.2f} vs {b[0]:.2f}/{b[1]:.2f} ms)" if a and b else "—"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update-failures", action="store_true")
    ap.add_argument("--doc")
    ap.add_argument("--models")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile (inductor) timing")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import thunder_c
    torch.set_num_threads(args.threads)
    thunder_c.set_num_threads(args.threads)
    names = args.models.split(",") if args.models else [s.name for s in zoo.SPECS]
    compile_backend = backend()
    rows, failures = [], {}
    fpath = HERE / "failures.json"
    if args.models and fpath.exists():
        failures = json.loads(fpath.read_text())
    for name in names:
        spec = zoo.get(name)
        row = {"name": name, "family": spec.family}
        if spec.skip:
            row["skip"] = spec.skip
            failures.pop(name, None)
            rows.append(row)
            print(f"{name}: skipped ({spec.skip})", flush=True)
            continue
        fails = {}
        for mode in runner.modes(spec):
            ok, r = attempt(spec, mode)
            row[mode] = (ok, r)
            if not ok:
                fails[mode] = r
            print(f"{name} {mode}: {'ok %.2g' % r if ok else r}", flush=True)
        if compile_backend:
            for mode in ("forward", "train"):
                row["backend_" + mode] = attempt(spec, mode, compile_backend)
        if fails:
            failures[name] = fails
        else:
            failures.pop(name, None)
        if not args.no_timing and row["forward"][0]:
            row["time"] = timings(spec, args.reps, not args.no_compile)
        rows.append(row)
    if args.update_failures:
        order = {s.name: i for i, s in enumerate(zoo.SPECS)}
        fpath.write_text(json.dumps(dict(sorted(failures.items(), key=lambda kv: order[kv[0]])), indent=2) + "\n")
        print(f"wrote {fpath}")
    if args.doc:
        write_doc(pathlib.Path(args.doc), rows, compile_backend is not None)
        print(f"wrote {args.doc}")


def cell(res):
    if res is None:
        return "n/a"
    return "yes" if res[0] else "no"


def blocker(row):
    seen = []
    for mode in ("forward", "train", "bf16"):
        r = row.get(mode)
        if r and not r[0] and r[1] not in seen:
            seen.append(r[1])
    return "; ".join(f"{m}" for m in seen).replace("|", "\\|")


def write_doc(path, rows, have_backend):
    import thunder_c  # noqa: F401
    import transformers
    import torchvision
    lines = [
        "# The model zoo",
        "",
        "Generated by `tests/models/report.py --doc docs/models.md` (do not edit by hand). Every model of",
        "`tests/models/zoo.py` — built from a small config with seeded random weights, nothing downloaded —",
        "through `thunder_c.jit` against PyTorch eager: *jit fwd* is the eval forward, *jit train* one train",
        "step (loss, every gradient, every parameter after an SGD step, the loss after it), both within the",
        "float32 tolerances of `tests/models/runner.py`; *backend* columns are the same through",
        "`torch.compile(backend=thunder_c.dynamo.ThunderCompiler())` (n/a: not available in this build).",
        "*bf16* is the eval forward under `torch.autocast(\"cpu\", torch.bfloat16)` for the language models,",
        "checked against eager float32 within a few times eager bf16's own error (its error in parentheses).",
        "*max error* is the largest error of the passing float32 modes, relative to each tensor's largest",
        "magnitude. Times are the eval forward over calls after a warm-up: the ratio of the minima, then",
        "min/median in ms of thunder_c vs the other (eager; torch.compile with its default inductor backend).",
        "*first call* is thunder_c's first call (trace and compile; fused kernels come from the disk cache",
        "when an earlier run compiled them). *unsupported* is the first failure of each failing mode: what",
        "blocks the model.",
        "`tests/models/failures.json` holds the same per model and mode; `tests/models/test_models.py`",
        "makes each a strict xfail.",
        "",
        f"Machine: {cpu_model()}, {torch.get_num_threads()} thread(s) for torch and thunder_c alike; "
        f"torch {torch.__version__}, "
        f"transformers {transformers.__version__}, torchvision {torchvision.__version__}.",
        "",
        "| model | family | jit fwd | jit train | bf16 | backend fwd | backend train | max error | "
        "thunder_c/eager | thunder_c/torch.compile | first call | unsupported |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "skip" in row:
            lines.append(f"| {row['name']} | {row['family']} | skipped | skipped | | | | | | | | {row['skip']} |")
            continue
        errs = [row[m][1] for m in ("forward", "train") if row.get(m) and row[m][0]]
        t = row.get("time", {})
        bf = cell(row.get("bf16")) if "bf16" in row else ""
        if bf == "yes":
            bf += f" ({row['bf16'][1]:.2g})"
        be_f = cell(row.get("backend_forward")) if have_backend else "n/a"
        be_t = cell(row.get("backend_train")) if have_backend else "n/a"
        ind = ratio(t.get("thunder_c"), t.get("inductor")) if "inductor" in t else (
            "—" if not t else "torch.compile failed")
        lines.append(
            f"| {row['name']} | {row['family']} | {cell(row['forward'])} | {cell(row['train'])} | {bf} | {be_f} | "
            f"{be_t} | {max(errs):.2g} | " if errs else
            f"| {row['name']} | {row['family']} | {cell(row['forward'])} | {cell(row['train'])} | {bf} | {be_f} | "
            f"{be_t} | — | ")
        lines[-1] += (f"{ratio(t.get('thunder_c'), t.get('eager'))} | {ind} | "
                      f"{t['first'] / 1e3:.2f} s | " if t else "— | — | — | ") + f"{blocker(row)} |"
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
