"""Runs the model zoo (zoo.py) and writes what it finds.

    PYTHONPATH=build/python .venv/bin/python tests/models/report.py [--update-failures] [--doc docs/models.md]
        [--models a,b] [--reps 20] [--threads 1] [--no-timing] [--no-compile]

--update-failures  rewrites tests/models/failures.json: per model and mode (forward, train, bf16) the
                   failure runner.reason() gives (the missing op, as thunder_c's NotImplementedError names
                   it), which test_models.py turns into strict xfails.
--doc PATH         writes the table of docs/models.md, one row per model: model | jit fwd (with the
                   bf16 autocast forward of the language models) | jit train | backend fwd | backend
                   train (the torch.compile backend, thunder_c.dynamo.ThunderCompiler, "n/a" when it is
                   not there, with how many of Dynamo's nodes ran in thunder-c where not all did) | max
                   error against eager | thunder_c / eager time | thunder_c / torch.compile time (the
                   eval forward, min/median over --reps calls after a warm-up; torch.compile with its
                   default inductor backend) | first-call time (trace + compile) | unsupported ops (what
                   blocks it). The header names the CPU, the thread count and the versions. --threads
                   sets torch's and thunder_c's thread counts alike (default 1: on a loaded machine one
                   thread each gives the steadiest comparison).
--no-compile       leaves out the torch.compile timing (inductor's first compile of a model takes a
                   minute or more on a small machine); its column then says "not measured".
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


def have_backend():
    """Whether thunder_c.dynamo.ThunderCompiler is there (the backend columns say n/a otherwise)."""
    try:
        from thunder_c.dynamo import ThunderCompiler  # noqa: F401
    except ImportError:
        return False
    return True


def attempt(spec, mode, compile=runner.thunder_jit):
    try:
        return True, runner.check(spec, mode, compile)
    except Exception as e:  # noqa: BLE001  (every failure is a row of the report)
        return False, runner.reason(e)


def attempt_backend(spec, mode):
    """attempt() through the torch.compile backend: (ok, max error or reason, (nodes thunder-c ran,
    nodes of Dynamo's graphs), the targets of the nodes it ran in eager)."""
    be = runner.ThunderBackend()
    ok, r = attempt(spec, mode, be)
    graphs = be.compiler.graphs
    eager = {s.target for g in graphs for s in g.split_reasons}
    eager |= {f"{reg.name} (fell back: {reg.fallback})" for g in graphs for reg in g.regions if reg.fallback}
    return ok, r, be.coverage(), eager


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
                torch._dynamo.reset()  # the model's own graphs (see runner.ThunderBackend)
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
    compile_backend = have_backend()
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
                row["backend_" + mode] = attempt_backend(spec, mode)
                ok, r, (thunder, total), _ = row["backend_" + mode]
                print(f"{name} backend {mode}: {'ok %.2g' % r if ok else r}; {thunder}/{total} nodes in thunder-c",
                      flush=True)
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
        write_doc(pathlib.Path(args.doc), rows, compile_backend)
        print(f"wrote {args.doc}")


def cell(res):
    if res is None:
        return "n/a"
    return "yes" if res[0] else "no"


def backend_cell(res):
    """yes / no, and for a pass how many of Dynamo's nodes ran in thunder-c where some ran in eager."""
    if res is None:
        return "n/a"
    ok, _, (thunder, total), _ = res
    if not ok:
        return "no"
    if not total:
        return "yes (no graph reached the backend)"
    return "yes" if thunder == total else f"yes ({thunder}/{total} nodes in thunder-c)"


def inductor_cell(t):
    if not t:
        return "—"
    if "inductor" in t:
        return ratio(t.get("thunder_c"), t["inductor"])
    if "inductor_error" in t:
        return f"torch.compile failed: {t['inductor_error']}".replace("|", "\\|")
    return "not measured (--no-compile)"


def blocker(row):
    """The first failure of each failing mode, then the targets the backend ran in eager."""
    seen = []
    for mode in ("forward", "train", "bf16", "backend_forward", "backend_train"):
        r = row.get(mode)
        if r and not r[0] and r[1] not in seen:
            seen.append(r[1])
    eager = sorted({t for mode in ("backend_forward", "backend_train") if row.get(mode) for t in row[mode][3]})
    if eager:
        seen.append("backend, in eager: " + ", ".join(eager))
    return "; ".join(seen).replace("|", "\\|")


def jit_forward_cell(row):
    text = cell(row["forward"])
    if "bf16" in row:
        ok, r = row["bf16"]
        text += f"; bf16 yes ({r:.2g})" if ok else "; bf16 no"
    return text


def write_doc(path, rows, have_backend):
    import thunder_c  # noqa: F401
    import transformers
    import torchvision
    lines = [
        "# The model zoo",
        "",
        "Generated by `tests/models/report.py --doc docs/models.md` (do not edit by hand). Every model of",
        "`tests/models/zoo.py` (its family in parentheses) — built from a small config with seeded random",
        "weights, nothing downloaded — through `thunder_c.jit` against PyTorch eager: *jit fwd* is the eval",
        "forward, *jit train* one train step (loss, every gradient, every parameter after an SGD step, the",
        "loss after it), both in float32 (`tests/models/runner.py`): the forward against eager, the train",
        "step against eager float64, each value within its tolerance plus a few times eager float32's own",
        "error on it; where float32 does not determine the step (eager float32 itself more than 5% off",
        "float64 on some value: ResNet-50 at random initialisation) only its first loss is compared in",
        "float32 and the step is checked again in float64 through thunder_c.jit. For the language",
        "models *jit fwd* adds *bf16*, the eval forward under `torch.autocast(\"cpu\", torch.bfloat16)`,",
        "checked against eager float32 within a few times eager bf16's own error (its error in parentheses).",
        "*backend* columns are the same forward and train step through",
        "`torch.compile(backend=thunder_c.dynamo.ThunderCompiler())` (n/a: not available in this build),",
        "with how many of the nodes Dynamo captured ran in thunder-c where not all did (the rest ran in",
        "eager). *max error* is the largest error of the passing float32 checks, relative to each tensor's",
        "largest magnitude. Times are the eval forward over calls after a warm-up: the ratio of the minima,",
        "then min/median in ms of thunder_c vs the other (eager; torch.compile with its default inductor",
        "backend). *first-call time* is thunder_c's first call (trace and compile; fused kernels come from",
        "the disk cache when an earlier run compiled them). *unsupported ops* is the first failure of each",
        "failing check, then the targets the backend left to eager: what blocks the model.",
        "`tests/models/failures.json` holds the thunder_c.jit failures per model and mode;",
        "`tests/models/test_models.py` makes each a strict xfail.",
        "",
        f"Machine: {cpu_model()}, {torch.get_num_threads()} thread(s) for torch and thunder_c alike; "
        f"torch {torch.__version__}, "
        f"transformers {transformers.__version__}, torchvision {torchvision.__version__}.",
        "",
        "| model | jit fwd | jit train | backend fwd | backend train | max error | thunder_c / eager time | "
        "thunder_c / torch.compile time | first-call time | unsupported ops |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        model = f"{row['name']} ({row['family']})"
        if "skip" in row:
            lines.append(f"| {model} | skipped | skipped | | | | | | | {row['skip']} |")
            continue
        errs = [row[m][1] for m in ("forward", "train", "backend_forward", "backend_train")
                if row.get(m) and row[m][0]]
        t = row.get("time", {})
        be_f = backend_cell(row.get("backend_forward")) if have_backend else "n/a"
        be_t = backend_cell(row.get("backend_train")) if have_backend else "n/a"
        times = (f"{ratio(t.get('thunder_c'), t.get('eager'))} | {inductor_cell(t)} | {t['first'] / 1e3:.2f} s"
                 if t else "— | — | —")
        lines.append(f"| {model} | {jit_forward_cell(row)} | {cell(row['train'])} | {be_f} | {be_t} | "
                     f"{f'{max(errs):.2g}' if errs else '—'} | {times} | {blocker(row)} |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
