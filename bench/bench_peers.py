"""thunder-c against its peers, side by side in one process: PyTorch eager, torch.compile (Inductor's CPU
C++ backend, default mode and mode="max-autotune"), Lightning Thunder (thunder.jit, its default
executors) and thunder-c (thunder_c.jit), each next to the physical floor measured in the same run.

Workloads (--only takes these names, comma-separated):
  gelu_tanh     F.gelu(x * 2 + 1, approximate="tanh"), x [16777216]             f32, bf16   memory-bound
  softmax       torch.softmax(x, -1), x [8192, 1024]                            f32, bf16   memory-bound
  layer_norm    F.layer_norm(x, (1024,), w, b, 1e-5), x [8192, 1024]            f32, bf16   memory-bound
  rms_norm      x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w       f32, bf16   memory-bound
                (written out, as bench_fusion's), x [8192, 1024]
  gpt2_fwd      examples/python/gpt2_module.py's Block, forward under no_grad    f32, bf16   GEMM-bound
  gpt2_fwd_bwd  the Block, out = block(x); out.backward(cot), x requiring grad   f32, bf16   GEMM-bound
                (bf16: module, input and cotangent in bf16)
  train_step    examples/python/train_gpt.py's GPT (nanoGPT-style: embeddings, 4 blocks, tied LM head):
                loss = model(idx, targets); loss.backward(); AdamW.step(); zero_grad   f32   GEMM-bound
  overhead      a cached call of (x + y) and of ((x + y) * y - x) on f32[4], microseconds per call
  compile       the first call (trace + compile + one run) of gelu_tanh f32 and gpt2_fwd f32: cold (fresh
                kernel caches) and warm (a new jit object, the disk cache populated)
The memory-bound shapes are bench_fusion's (bench/run_fusion.sh), so the figures compare.

Peers (--skip-peer takes these names): eager, compile (torch.compile default mode), compile_max
(torch.compile mode="max-autotune"), thunder (Lightning Thunder), thunder_c. Eager is always run once as
the reference each peer's output (and, for the backward rows, gradients) is checked against; a peer
whose first output differs beyond the row's tolerance is timed but marked "MISMATCH" and left out of
the ratios. In bf16 rows a peer that differs from bf16 eager passes when each of its outputs is as
close to the same computation in float32 as bf16 eager's own (bf16 eager rounds every intermediate,
and accumulates LayerNorm's weight and bias gradients in bf16). A peer that raises (or whose first call runs past --compile-timeout) gets its error in its
cells instead of figures; the other peers go on.

Floors, timed in the same rounds:
  memory-bound  copy: one OpenMP copy of x's bytes with ordinary stores (bench/floor.c, loaded with
                ctypes from BUILD/bench/libbench_floor.so: read once, write once, as bench_fusion's
                floor); stream: the same copy with non-temporal stores; torch copy_: `dst.copy_(x)` into
                a preallocated tensor. Ratios use the copy floor.
  GEMM-bound    the block's (model's) GEMMs, each shape timed alone per round and summed with its
                multiplicity: once with torch.matmul (MKL; oneDNN for bf16) and once with
                thunder_c.jit(lambda a, b: a @ b) (Debian's oneDNN through thunder-c's BLAS executor).
                Forward: qkv, q@k^T, att@v, proj, fc, fc_proj; backward: for each linear the input and
                the weight gradient GEMMs, for attention the four batched GEMMs of dq, dk, dP, dv; each
                operand in the layout the block multiplies it in (x @ W^T: W a transposed view).
                Ratios use the faster of the two floors (named in the ratio table).
Timing: per row, a warm-up round, then --rounds rounds of one call of each peer and each floor, in an
order rotated every round (so drift hits every peer alike); min / median / max. Ratios are of medians,
the ratio of minimums in parentheses: peer / floor, and peer / thunder-c (> 1: thunder-c is faster).

Lightning Thunder 0.2.6 does not import beside torch 2.14 unmodified. Before `import thunder` this
script sets the named-tensor methods torch 2.14 lacks and Thunder only lists in its op tables
(torch.Tensor.align_as, align_to, has_names, refine_names, rename) to stand-ins that raise, and while
thunder imports it makes torch.autograd.Function.apply a Python classmethod (Thunder's jit_ext reads
`Function.apply.__func__`, which torch 2.14's C classmethod lacks); the original is restored right
after the import. The output says what was shimmed; a failed import puts its error in every Thunder cell.

Run (Release build; cmake --build build --target bench_floor; never a timed test):
    PYTHONPATH=build/python .venv/bin/python bench/bench_peers.py [--rounds 7] [--threads 2]
        [--only gelu_tanh,gpt2_fwd] [--skip-peer compile_max] [--dtypes f32,bf16] [--batch 8 --seq 256
        --embd 768 --heads 12] [--train-batch 16] [--calls 2000] [--compile-reps 1]
        [--compile-timeout 240] [--build build] [--quick]
--quick: small shapes, 2 rounds, few calls, f32 only, a 1-layer model in train_step, only gelu_tanh in
the compile rows, and compile_max skipped unless --skip-peer is given: a smoke run of about two minutes
on an idle machine. Tables go to stdout (markdown), progress and compiler chatter to stderr."""
import argparse
import os
import sys

WORKLOADS = ["gelu_tanh", "softmax", "layer_norm", "rms_norm", "gpt2_fwd", "gpt2_fwd_bwd", "train_step",
             "overhead", "compile"]
PEERS = ["eager", "compile", "compile_max", "thunder", "thunder_c"]
PEER_LABEL = {"eager": "eager", "compile": "torch.compile", "compile_max": "torch.compile max-autotune",
              "thunder": "Thunder", "thunder_c": "thunder-c"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=None)
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per row (default 7; --quick: 2)")
    ap.add_argument("--gpt2-rounds", type=int, default=None, help="timed rounds for the GPT-2 and training "
                    "rows (default: --rounds)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every peer (default 2)")
    ap.add_argument("--only", default=None, help="comma-separated workloads: " + ", ".join(WORKLOADS))
    ap.add_argument("--skip-peer", default=None, help="comma-separated peers: " + ", ".join(PEERS)
                    + " (default none; --quick: compile_max)")
    ap.add_argument("--dtypes", default=None, help="f32 and/or bf16 (default both; --quick: f32)")
    ap.add_argument("--batch", type=int, default=None, help="GPT-2 block batch (default 8)")
    ap.add_argument("--seq", type=int, default=None, help="GPT-2 block sequence length (default 256)")
    ap.add_argument("--embd", type=int, default=None, help="GPT-2 block n_embd (default 768)")
    ap.add_argument("--heads", type=int, default=None, help="GPT-2 block heads (default 12)")
    ap.add_argument("--train-batch", type=int, default=None, help="training step batch (default 16)")
    ap.add_argument("--calls", type=int, default=None, help="calls per round in the overhead rows (default 2000)")
    ap.add_argument("--compile-reps", type=int, default=1, help="cold and warm compiles per peer and function")
    ap.add_argument("--compile-timeout", type=float, default=240.0,
                    help="seconds a peer's first call may take before it is abandoned (default 240)")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"),
                    help="the build directory (for bench/libbench_floor.so)")
    ap.add_argument("--quick", action="store_true", help="small shapes, 2 rounds, f32 only: a smoke run")
    a = ap.parse_args(argv)
    q = a.quick
    dflt = lambda v, full, quick: v if v is not None else (quick if q else full)  # noqa: E731
    a.rounds = dflt(a.rounds, 7, 2)
    a.gpt2_rounds = dflt(a.gpt2_rounds, a.rounds, a.rounds)
    a.dtypes = dflt(a.dtypes, "f32,bf16", "f32")
    a.batch, a.seq = dflt(a.batch, 8, 2), dflt(a.seq, 256, 64)
    a.embd, a.heads = dflt(a.embd, 768, 256), dflt(a.heads, 12, 4)
    a.train_batch = dflt(a.train_batch, 16, 4)
    a.calls = dflt(a.calls, 2000, 200)
    only = [w for w in (a.only or "").split(",") if w] or list(WORKLOADS)
    bad = [w for w in only if w not in WORKLOADS]
    if bad:
        ap.error(f"--only: unknown workload(s) {', '.join(bad)}; expected some of {', '.join(WORKLOADS)}")
    a.only = only
    skip = [p for p in dflt(a.skip_peer, "", "compile_max").split(",") if p]
    bad = [p for p in skip if p not in PEERS]
    if bad:
        ap.error(f"--skip-peer: unknown peer(s) {', '.join(bad)}; expected some of {', '.join(PEERS)}")
    a.peers = [p for p in PEERS if p not in skip]
    a.dtype_names = [d for d in a.dtypes.split(",") if d]
    if not a.dtype_names or not set(a.dtype_names) <= {"f32", "bf16"}:
        ap.error(f"--dtypes: expected f32 and/or bf16, but got {a.dtypes!r}")
    if min(a.rounds, a.gpt2_rounds, a.threads, a.batch, a.seq, a.embd, a.heads, a.train_batch, a.calls,
           a.compile_reps) < 1 or a.embd % a.heads:
        ap.error("--rounds/--threads/--batch/--seq/--embd/--heads/--train-batch/--calls/--compile-reps must be "
                 "positive and --embd a multiple of --heads")
    return a


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:
    # Before torch, MKL and OpenMP load, so every thread pool starts at the same size.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "THUNDER_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import contextlib  # noqa: E402
import copy  # noqa: E402
import ctypes  # noqa: E402
import datetime  # noqa: E402
import importlib.metadata  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

from bench_host import cpu_flags, cpu_model  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import thunder_c  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
from gpt2_module import Block  # noqa: E402
from train_gpt import GPT  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- Lightning Thunder, imported beside torch 2.14 ----------------------------------------------------------

THUNDER_SHIMMED_METHODS = ["align_as", "align_to", "has_names", "refine_names", "rename"]


def import_thunder():
    """Imports Lightning Thunder with the shims the module docstring describes. Returns (module or None,
    list of what was shimmed, error text or None)."""
    shimmed = []
    for name in THUNDER_SHIMMED_METHODS:
        if not hasattr(torch.Tensor, name):
            def stand_in(*args, _name=name, **kwargs):
                raise NotImplementedError(f"torch.Tensor.{_name} (named tensors) is not in torch {torch.__version__}")
            stand_in.__name__, stand_in.__qualname__ = name, "Tensor." + name
            setattr(torch.Tensor, name, stand_in)
            shimmed.append(f"torch.Tensor.{name}")
    fn_cls = torch.autograd.function.Function
    orig_apply = fn_cls.__dict__["apply"]
    patched = not hasattr(fn_cls.apply, "__func__")
    if patched:
        def apply(cls, *args, **kwargs):
            return orig_apply.__get__(None, cls)(*args, **kwargs)
        fn_cls.apply = classmethod(apply)
        shimmed.append("torch.autograd.Function.apply (a Python classmethod while thunder imports)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import thunder
        return thunder, shimmed, None
    except Exception as e:  # any import failure: recorded, never fatal
        return None, shimmed, f"{type(e).__name__}: {e}"
    finally:
        if patched:
            fn_cls.apply = orig_apply


# ---- machine and versions --------------------------------------------------------------------------------------

def pkg_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def torch_blas():
    """(BLAS_INFO, MKL line, oneDNN line) from torch.__config__.show()."""
    cfg = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", cfg)
    dnnl = re.search(r"MKL-DNN (v[0-9.]+)", cfg)
    return (blas.group(1) if blas else "?", ("MKL " + mkl.group(1)) if mkl else "no MKL",
            ("oneDNN " + dnnl.group(1)) if dnnl else "no oneDNN")


def debian_dnnl():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libdnnl2"], capture_output=True, text=True,
                             timeout=10)
        if out.returncode == 0 and out.stdout:
            return "oneDNN " + out.stdout.split("-")[0] + " (Debian libdnnl2)"
    except (OSError, subprocess.SubprocessError):
        pass
    return "oneDNN (Debian; version unknown)"


# ---- timing helpers ------------------------------------------------------------------------------------------

def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


class FirstCallTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raises FirstCallTimeout in the main thread when the body runs past `seconds` (SIGALRM)."""
    def on_alarm(signum, frame):
        raise FirstCallTimeout(f"first call ran past --compile-timeout {seconds:g} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def short_error(e):
    if isinstance(e, FirstCallTimeout) or "FirstCallTimeout" in str(e):  # Inductor wraps it in InductorError
        return f"timed out: first call > {ARGS.compile_timeout:g} s (--compile-timeout)"
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= 160 else text[:157] + "..."


def close(got, want, rtol, atol_rel):
    """(ok, max |got - want|, that relative to max |want|): elementwise |got - want| <= rtol * |want| +
    atol_rel * max |want|, in float64."""
    g, w = got.detach().double(), want.detach().double()
    if g.shape != w.shape:
        return False, float("inf"), float("inf")
    scale = max(float(w.abs().max()) if w.numel() else 0.0, 1e-30)
    d = (g - w).abs()
    ok = bool(torch.isfinite(g).all() == torch.isfinite(w).all()) and bool(
        (d <= rtol * w.abs() + atol_rel * scale).all())
    m = float(d.max()) if d.numel() else 0.0
    return ok, m, m / scale


def check_all(gots, wants, rtol, atol_rel):
    """close() over paired lists of tensors; (ok, worst relative error)."""
    ok, worst = True, 0.0
    for g, w in zip(gots, wants):
        o, _, rel = close(g, w, rtol, atol_rel)
        ok, worst = ok and o, max(worst, rel)
    return ok, worst


# Tolerances (rtol, atol as a fraction of the reference's largest magnitude) per row kind and dtype.
TOL = {("mem", "f32"): (1e-4, 1e-5), ("mem", "bf16"): (2e-2, 2e-2),
       ("fwd", "f32"): (1e-3, 1e-4), ("fwd", "bf16"): (5e-2, 5e-2),
       ("bwd", "f32"): (1e-3, 1e-3), ("bwd", "bf16"): (1e-1, 1e-1)}


# ---- the peers -------------------------------------------------------------------------------------------------

class Peers:
    """Makes each peer's compiled form of a function or module."""

    def __init__(self, names, thunder_mod, thunder_err):
        self.names = names
        self.thunder = thunder_mod
        self.thunder_err = thunder_err
        self.first_torch_compile_s = None  # the process's first torch.compile call (one-time start-up)

    def make(self, peer, fn):
        if peer == "eager":
            return fn
        if peer == "compile":
            return torch.compile(fn)
        if peer == "compile_max":
            return torch.compile(fn, mode="max-autotune")
        if peer == "thunder":
            if self.thunder is None:
                raise RuntimeError(f"lightning-thunder {pkg_version('lightning-thunder')} did not import: "
                                   f"{self.thunder_err}")
            return self.thunder.jit(fn)
        if peer == "thunder_c":
            return thunder_c.jit(fn)
        raise ValueError(peer)


class Row:
    """One table row: a workload at one dtype, timed for every peer and floor."""

    def __init__(self, section, name, dtype, shape, unit="ms"):
        self.section, self.name, self.dtype, self.shape, self.unit = section, name, dtype, shape, unit
        self.times = {}      # peer or floor -> list of times (ms, or us for the overhead rows)
        self.status = {}     # peer -> None (ok), "MISMATCH ..." or "error ..."
        self.first = {}      # peer -> first-call seconds
        self.err = {}        # peer -> worst relative error against eager
        self.floor_names = []
        self.ref32 = None    # bf16 rows: () -> the eager outputs computed in float32 from the same values
        self.err32 = {}      # peer -> (its worst relative error against ref32, eager's)


def closer_to_f32(row, p, out, ref, tol):
    """A bf16 peer that differs from bf16 eager passes when every output is as close to the float32
    computation as eager's own (within 1.25x of eager's error, or within tol): bf16 eager rounds where
    the peers need not, and some of its kernels accumulate in bf16 (LayerNorm's weight and bias
    gradients, for one)."""
    if not hasattr(row, "_ref32"):
        try:
            row._ref32 = row.ref32()
        except Exception as e:
            log(f"    float32 reference failed: {short_error(e)}")
            row._ref32 = None
    if row._ref32 is None:
        return False
    ok, wp, we = True, 0.0, 0.0
    for g, w, r in zip(out, ref, row._ref32):
        _, _, ep = close(g, r, 0.0, 0.0)
        _, _, ee = close(w, r, 0.0, 0.0)
        ok = ok and ep <= max(tol, 1.25 * ee)
        wp, we = max(wp, ep), max(we, ee)
    row.err32[p] = (wp, we)
    return ok


def run_row(row, peers, setups, floors, rounds, compile_timeout):
    """Times one row. setups: peer -> () -> step, where step() -> (seconds, outputs list) runs one timed
    unit (untimed set-up outside the seconds); the eager setup gives the reference outputs. floors:
    name -> () -> seconds. Errors and mismatches are recorded per peer, never raised."""
    log(f"  {row.name} {row.dtype} {row.shape}")
    steps = {}
    ref = None
    try:
        ref_step = setups["eager"]()
        _, ref = ref_step()
        if "eager" in peers.names:
            steps["eager"] = ref_step
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        for p in peers.names:
            row.status[p] = "error (eager reference): " + short_error(e)
        return row
    for p in peers.names:
        if p == "eager":
            row.first["eager"] = None
            continue
        t0 = time.perf_counter()
        try:
            with time_limit(compile_timeout):
                step = setups[p]()
                _, out = step()
        except Exception as e:
            log(f"    {p}: {short_error(e)}")
            if "FirstCallTimeout" not in str(e) and not isinstance(e, FirstCallTimeout):
                traceback.print_exc(file=sys.stderr)
            if p.startswith("compile"):
                torch._dynamo.reset()
            row.status[p] = "error: " + short_error(e)
            continue
        row.first[p] = time.perf_counter() - t0
        if p.startswith("compile") and peers.first_torch_compile_s is None:
            peers.first_torch_compile_s = row.first[p]
        rtol, atol = row.tol
        ok, worst = check_all(out, ref, rtol, atol)
        row.err[p] = worst
        if not ok and row.ref32 is not None:
            ok = closer_to_f32(row, p, out, ref, atol)
        if not ok:
            row.status[p] = f"MISMATCH (max err {worst:.1e} of max abs)"
            log(f"    {p}: {row.status[p]}")
        steps[p] = step
        del out
    del ref
    row.floor_names = list(floors)
    runners = list(steps.items()) + list(floors.items())
    for r in range(rounds + 1):  # round 0 warms up
        k = r % len(runners)
        for name, fn in runners[k:] + runners[:k]:
            if name in row.status and row.status[name].startswith("error"):
                continue
            try:
                res = fn()
                secs = res[0] if isinstance(res, tuple) else res
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                row.status[name] = "error while timing: " + short_error(e)
                continue
            if r > 0:
                row.times.setdefault(name, []).append(secs * (1e6 if row.unit == "us" else 1e3))
            del res
    return row


# ---- memory-bound workloads ------------------------------------------------------------------------------------

class Floors:
    """The copy floors (bench/floor.c through ctypes) and GEMM floors."""

    def __init__(self, build):
        self.lib = None
        path = os.path.join(build, "bench", "libbench_floor.so")
        try:
            lib = ctypes.CDLL(path)
            lib.th_bench_copy_ms.restype = ctypes.c_double
            lib.th_bench_copy_ms.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            self.lib = lib
        except (OSError, AttributeError) as e:
            self.err = f"{path}: {e} (cmake --build build --target bench_floor)"
            log(f"bench_peers: no C copy floor: {self.err}; the torch copy_ floor stands in")

    def copy_floors(self, x):
        """name -> () -> seconds, for a read-once-write-once pass over x's bytes."""
        dst = torch.empty_like(x)
        dst.copy_(x)
        nbytes = x.numel() * x.element_size()
        out = {}
        if self.lib is not None:
            out["copy"] = lambda: self.lib.th_bench_copy_ms(dst.data_ptr(), x.data_ptr(), nbytes, 0) / 1e3
            out["stream"] = lambda: self.lib.th_bench_copy_ms(dst.data_ptr(), x.data_ptr(), nbytes, 1) / 1e3

        def torch_copy():
            t0 = time.perf_counter()
            dst.copy_(x)
            return time.perf_counter() - t0
        out["torch copy_"] = torch_copy
        return out


def mem_workloads(quick):
    n1, rows = (1 << 20, 1024) if quick else (16777216, 8192)
    return [
        ("gelu_tanh", (n1,), [], (-2.0, 2.0), lambda x: F.gelu(x * 2 + 1, approximate="tanh")),
        ("softmax", (rows, 1024), [], (-4.0, 4.0), lambda x: torch.softmax(x, -1)),
        ("layer_norm", (rows, 1024), [("w", (0.5, 1.5)), ("b", (-0.5, 0.5))], (-2.0, 2.0),
         lambda x, w, b: F.layer_norm(x, (1024,), w, b, 1e-5)),
        ("rms_norm", (rows, 1024), [("w", (0.5, 1.5))], (-2.0, 2.0),
         lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w),
    ]


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def uniform(shape, lo, hi, dtype, gen):
    return (torch.rand(shape, generator=gen) * (hi - lo) + lo).to(dtype)


def fn_setups(peers, fn, args):
    """peer -> setup for a forward-only function of args (no_grad)."""
    def setup(p):
        def make():
            f = peers.make(p, fn)

            def step():
                with torch.no_grad():
                    t0 = time.perf_counter()
                    out = f(*args)
                    return time.perf_counter() - t0, [out]
            return step
        return make
    return {p: setup(p) for p in ["eager"] + peers.names}


def run_mem(a, peers, floors, results):
    for dname in a.dtype_names:
        for name, shape, params, (lo, hi), fn in mem_workloads(a.quick):
            if name not in a.only:
                continue
            gen = torch.Generator().manual_seed(0)
            dt = DTYPES[dname]
            x = uniform(shape, lo, hi, dt, gen)
            ps = [uniform((shape[-1],), plo, phi, dt, gen) for _, (plo, phi) in params]
            row = Row("mem", name, dname, "x " + str(list(shape)))
            row.tol = TOL[("mem", dname)]
            row.bytes = 2 * x.numel() * x.element_size() + sum(p.numel() * p.element_size() for p in ps)
            if dt != torch.float32:
                def ref32(fn=fn, x=x, ps=ps):
                    with torch.no_grad():
                        return [fn(x.float(), *[q.float() for q in ps])]
                row.ref32 = ref32
            results.append(run_row(row, peers, fn_setups(peers, fn, [x] + ps), floors.copy_floors(x), a.rounds,
                                   a.compile_timeout))
            del x, ps


# ---- GEMM floors -------------------------------------------------------------------------------------------------

def block_gemms(B, T, C, H, backward):
    """The GPT-2 block's GEMMs as (label, batch, M, K, N, ta, tb, count): [batch, M, K] @ [batch, K, N],
    an operand with ta / tb set stored transposed (a transposed view of a contiguous [.., K, M] or
    [.., N, K] tensor), as the block's own operands are: nn.Linear multiplies by the transposed weight,
    its weight gradient by the transposed output gradient, attention by k^T and, in the backward, by
    the transposed scores."""
    M, hs = B * T, C // H
    lin = [("qkv", M, C, 3 * C), ("proj", M, C, C), ("fc", M, C, 4 * C), ("fc_proj", M, 4 * C, C)]
    g = [(n, 1, m, k, nn, False, True, 1) for n, m, k, nn in lin]                  # x @ W^T
    g += [("q@k^T", B * H, T, hs, T, False, True, 1), ("att@v", B * H, T, T, hs, False, False, 1)]
    if backward:
        g += [(n + " dx", 1, m, nn, k, False, False, 1) for n, m, k, nn in lin]    # dy @ W
        g += [(n + " dW", 1, nn, m, k, True, False, 1) for n, m, k, nn in lin]     # dy^T @ x
        g += [("attn dq", B * H, T, T, hs, False, False, 1),                       # dS @ k
              ("attn dk, dv", B * H, T, T, hs, True, False, 2),                    # dS^T @ q, P^T @ dO
              ("attn dP", B * H, T, hs, T, False, True, 1)]                        # dO @ v^T
    return g


def gemm_flops(gemms):
    return sum(2 * b * m * k * n * c for _, b, m, k, n, _, _, c in gemms)


def merge_gemms(gemms):
    """Distinct shapes and layouts with summed counts."""
    out = {}
    for _, b, m, k, n, ta, tb, c in gemms:
        out[(b, m, k, n, ta, tb)] = out.get((b, m, k, n, ta, tb), 0) + c
    return out


def operand(b, rows, cols, transposed, dtype):
    """A [b, rows, cols] operand ([rows, cols] when b == 1), a transposed view when `transposed`."""
    lead = () if b == 1 else (b,)
    if transposed:
        return torch.randn(*lead, cols, rows).to(dtype).transpose(-1, -2)
    return torch.randn(*lead, rows, cols).to(dtype)


def gemm_floors(gemms, dtype):
    """name -> () -> seconds: every distinct GEMM shape and layout timed once, weighted by its count and
    summed; with torch.matmul and with thunder_c.jit's lone matmul (oneDNN)."""
    ops = [(operand(b, m, k, ta, dtype), operand(b, k, n, tb, dtype), c)
           for (b, m, k, n, ta, tb), c in merge_gemms(gemms).items()]
    tc = thunder_c.jit(lambda p, q: p @ q)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", thunder_c.RecompileWarning)  # one program per shape, by design
        for p, q, _ in ops:  # compile (one program per shape and layout) and warm up
            tc(p, q)
            torch.matmul(p, q)

    def timer(mm):
        def run():
            total = 0.0
            with torch.no_grad():
                for p, q, c in ops:
                    t0 = time.perf_counter()
                    mm(p, q)
                    total += (time.perf_counter() - t0) * c
            return total
        return run
    return {"GEMM torch.matmul": timer(torch.matmul), "GEMM oneDNN (thunder_c)": timer(tc)}


# ---- GPT-2 block ---------------------------------------------------------------------------------------------------

def run_gpt2(a, peers, results):
    B, T, C, H = a.batch, a.seq, a.embd, a.heads
    for kind in ("gpt2_fwd", "gpt2_fwd_bwd"):
        if kind not in a.only:
            continue
        for dname in a.dtype_names:
            dt = DTYPES[dname]
            torch.manual_seed(0)
            backward = kind == "gpt2_fwd_bwd"
            block = Block(C, H, T).to(dt)
            block.train(backward)  # dropout is 0.0: the flag changes nothing else
            params = list(block.parameters())
            x = torch.randn(B, T, C, dtype=dt, requires_grad=backward)
            cot = torch.randn(B, T, C, dtype=dt)
            row = Row("gemm", kind, dname, f"B={B} T={T} C={C} H={H}")
            row.tol = TOL[("bwd" if backward else "fwd", dname)]
            gemms = block_gemms(B, T, C, H, backward)
            row.gflop = gemm_flops(gemms) / 1e9

            def setup(p, backward=backward, block=block, x=x, cot=cot, params=params):
                def make():
                    m = peers.make(p, block)

                    def step():
                        if not backward:
                            with torch.no_grad():
                                t0 = time.perf_counter()
                                out = m(x)
                                return time.perf_counter() - t0, [out]
                        for q in params:
                            q.grad = None
                        x.grad = None
                        t0 = time.perf_counter()
                        out = m(x)
                        out.backward(cot)
                        secs = time.perf_counter() - t0
                        return secs, [out.detach(), x.grad] + [q.grad for q in params]
                    return step
                return make
            if dt != torch.float32:
                def ref32(block=block, x=x, cot=cot, backward=backward):
                    b32 = copy.deepcopy(block).float()
                    x32 = x.detach().float().requires_grad_(backward)
                    if not backward:
                        with torch.no_grad():
                            return [b32(x32)]
                    out = b32(x32)
                    out.backward(cot.float())
                    return [out.detach(), x32.grad] + [q.grad for q in b32.parameters()]
                row.ref32 = ref32
            setups = {p: setup(p) for p in ["eager"] + peers.names}
            results.append(run_row(row, peers, setups, gemm_floors(gemms, dt), a.gpt2_rounds, a.compile_timeout))
            del block, x, cot, params


# ---- the training step -------------------------------------------------------------------------------------------

TRAIN = dict(vocab=96, n_layer=4, n_head=4, n_embd=128, block_size=64)


def train_gemms(batch):
    V, L, C, T = TRAIN["vocab"], TRAIN["n_layer"], TRAIN["n_embd"], TRAIN["block_size"]
    g = block_gemms(batch, T, C, TRAIN["n_head"], True) * L
    M = batch * T
    g += [("lm_head", 1, M, C, V, False, True, 1), ("lm_head dx", 1, M, V, C, False, False, 1),
          ("lm_head dW", 1, V, M, C, True, False, 1)]
    return g


def run_train(a, peers, results):
    if "train_step" not in a.only:
        return
    if a.quick:
        TRAIN["n_layer"] = 1
    torch.manual_seed(0)
    base = GPT(TRAIN["vocab"], n_layer=TRAIN["n_layer"], n_head=TRAIN["n_head"], n_embd=TRAIN["n_embd"],
               block_size=TRAIN["block_size"])
    gen = torch.Generator().manual_seed(1)
    nb, T = 8, TRAIN["block_size"]
    batches = [(torch.randint(0, TRAIN["vocab"], (a.train_batch, T), generator=gen),
                torch.randint(0, TRAIN["vocab"], (a.train_batch, T), generator=gen)) for _ in range(nb)]
    row = Row("gemm", "train_step", "f32", f"GPT {TRAIN['n_layer']} layers C={TRAIN['n_embd']} "
              f"T={T} batch={a.train_batch} vocab={TRAIN['vocab']}, AdamW")
    row.tol = TOL[("bwd", "f32")]
    gemms = train_gemms(a.train_batch)
    row.gflop = gemm_flops(gemms) / 1e9

    def setup(p):
        def make():
            model = copy.deepcopy(base)  # each peer trains its own copy from the same initial weights
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
            m = peers.make(p, model)
            params = list(model.parameters())
            state = {"i": 0}

            def step():
                idx, tgt = batches[state["i"] % nb]
                state["i"] += 1
                t0 = time.perf_counter()
                loss = m(idx, tgt)
                loss.backward()
                t1 = time.perf_counter()
                # the first step's loss and gradients are the check, cloned outside the timed region
                check = [loss.detach()] + [q.grad.detach().clone() for q in params] if state["i"] == 1 else []
                t2 = time.perf_counter()
                opt.step()
                opt.zero_grad(set_to_none=True)
                return (t1 - t0) + (time.perf_counter() - t2), check
            return step
        return make
    setups = {p: setup(p) for p in ["eager"] + peers.names}
    results.append(run_row(row, peers, setups, gemm_floors(gemms, torch.float32), a.gpt2_rounds,
                           a.compile_timeout))


# ---- cached-call overhead ------------------------------------------------------------------------------------

def run_overhead(a, peers, results):
    if "overhead" not in a.only:
        return
    x, y = torch.randn(4), torch.randn(4)
    for label, fn in (("1 op: x + y", lambda x, y: x + y), ("3 ops: (x + y) * y - x", lambda x, y: (x + y) * y - x)):
        row = Row("overhead", label, "f32", "f32[4]", unit="us")
        row.tol = TOL[("mem", "f32")]

        def setup(p, fn=fn):
            def make():
                f = peers.make(p, fn)
                state = {"first": True}

                def step():
                    if state["first"]:
                        state["first"] = False
                        return 0.0, [f(x, y)]
                    with torch.no_grad():
                        t0 = time.perf_counter()
                        for _ in range(a.calls):
                            f(x, y)
                        return (time.perf_counter() - t0) / a.calls, []
                return step
            return make
        setups = {p: setup(p) for p in ["eager"] + peers.names}
        results.append(run_row(row, peers, setups, {}, a.rounds, a.compile_timeout))


# ---- compile time ---------------------------------------------------------------------------------------------

def run_compile(a, peers, results):
    if "compile" not in a.only:
        return
    from torch._inductor.utils import clear_caches, fresh_cache
    gen = torch.Generator().manual_seed(0)
    xg = uniform(mem_workloads(a.quick)[0][1], -2.0, 2.0, torch.float32, gen)
    B, T, C, H = a.batch, a.seq, a.embd, a.heads
    torch.manual_seed(0)
    block = Block(C, H, T).eval()
    xb = torch.randn(B, T, C)
    gelu = lambda x: F.gelu(x * 2 + 1, approximate="tanh")  # noqa: E731
    cases = [("gelu_tanh", "f32", gelu, xg)] + ([] if a.quick else [("gpt2_fwd", "f32", block, xb)])
    # pay the one-time start-up of each compiler before timing (dynamo/Inductor imports and the C++
    # toolchain probe; Thunder's interpreter), so "cold" means a cold cache, not a cold process
    for p in peers.names:
        if p in ("eager",):
            continue
        try:
            t0 = time.perf_counter()
            with torch.no_grad():
                peers.make(p, lambda u: u * 3 + 1)(torch.ones(8))
            if p.startswith("compile") and peers.first_torch_compile_s is None:
                peers.first_torch_compile_s = time.perf_counter() - t0
        except Exception:
            pass
    for name, dname, fn, x in cases:
        row = Row("compile", name, dname, "x " + str(list(x.shape)) if name == "gelu_tanh" else f"B={B} T={T} C={C} H={H}")
        log(f"  compile {name}")
        for p in peers.names:
            if p == "eager":
                continue
            cold, warm = [], []
            try:
                for _ in range(a.compile_reps):
                    if p.startswith("compile"):
                        with fresh_cache():
                            torch._dynamo.reset()
                            cold.append(first_call(peers, p, fn, x, a.compile_timeout))
                            torch._dynamo.reset()
                            clear_caches()  # in-memory caches; the disk cache stays populated
                            warm.append(first_call(peers, p, fn, x, a.compile_timeout))
                        torch._dynamo.reset()
                    elif p == "thunder_c":
                        old = os.environ.get("XDG_CACHE_HOME")
                        with tempfile.TemporaryDirectory(prefix="bench_peers_cache-") as d:
                            os.environ["XDG_CACHE_HOME"] = d
                            try:
                                cold.append(first_call(peers, p, fn, x, a.compile_timeout))
                                warm.append(first_call(peers, p, fn, x, a.compile_timeout))
                            finally:
                                if old is None:
                                    os.environ.pop("XDG_CACHE_HOME", None)
                                else:
                                    os.environ["XDG_CACHE_HOME"] = old
                    else:  # Thunder keeps no cache across jit objects: cold and warm are both a new jit object
                        cold.append(first_call(peers, p, fn, x, a.compile_timeout))
                        warm.append(first_call(peers, p, fn, x, a.compile_timeout))
            except Exception as e:
                if "FirstCallTimeout" not in str(e) and not isinstance(e, FirstCallTimeout):
                    traceback.print_exc(file=sys.stderr)
                torch._dynamo.reset()
                row.status[p] = "error: " + short_error(e)
                continue
            row.times[p + " cold"] = cold
            row.times[p + " warm"] = warm
        results.append(row)


def first_call(peers, p, fn, x, limit):
    """Milliseconds of a new jit object's first call (trace + compile + one run) under no_grad."""
    with time_limit(limit):
        t0 = time.perf_counter()
        f = peers.make(p, fn)
        with torch.no_grad():
            f(x)
        return (time.perf_counter() - t0) * 1e3


# ---- tables -------------------------------------------------------------------------------------------------------

def fmt3(ts, unit):
    d = 2 if unit == "us" else (1 if statistics.median(ts) >= 100 else 2)
    m = mmm(ts)
    return f"{m[0]:.{d}f} / {m[1]:.{d}f} / {m[2]:.{d}f}"


def cell(row, who):
    st = row.status.get(who)
    if st and st.startswith("error"):
        return st
    if who not in row.times:
        return "—"
    s = fmt3(row.times[who], row.unit)
    return f"{s} **{st}**" if st else s


def ok_for_ratio(row, who):
    return who in row.times and not row.status.get(who)


def ratio(row, num, den):
    """'median ratio (ratio of mins)' of num over den, or '—'."""
    if not (num in row.times and den in row.times):
        return "—"
    if not (ok_for_ratio(row, num) or num in row.floor_names) or not (ok_for_ratio(row, den) or den in row.floor_names):
        return "—"
    n, d = mmm(row.times[num]), mmm(row.times[den])
    return f"{n[1] / d[1]:.2f}x ({n[0] / d[0]:.2f}x)"


def print_tables(results, peers):
    labels = [PEER_LABEL[p] for p in peers.names]
    mem = [r for r in results if r.section == "mem"]
    if mem:
        print("\n### Memory-bound workloads (ms per call: min / median / max)\n")
        print("| workload | dtype | shape | MiB moved | floor: copy | floor: stream | torch copy_ | "
              + " | ".join(labels) + " |")
        print("|---" * (7 + len(labels)) + "|")
        for r in mem:
            print(f"| {r.name} | {r.dtype} | {r.shape} | {r.bytes / 2**20:.0f} | {cell(r, 'copy')} | "
                  f"{cell(r, 'stream')} | {cell(r, 'torch copy_')} | "
                  + " | ".join(cell(r, p) for p in peers.names) + " |")
        ratio_table(mem, peers, lambda r: "copy" if "copy" in r.times else "torch copy_")
    gemm = [r for r in results if r.section == "gemm"]
    if gemm:
        print("\n### GEMM-bound workloads (ms per call: min / median / max)\n")
        print("| workload | dtype | shape | GEMM GFLOP | floor: torch.matmul | floor: oneDNN (thunder_c) | "
              + " | ".join(labels) + " |")
        print("|---" * (6 + len(labels)) + "|")
        for r in gemm:
            print(f"| {r.name} | {r.dtype} | {r.shape} | {r.gflop:.1f} | {cell(r, 'GEMM torch.matmul')} | "
                  f"{cell(r, 'GEMM oneDNN (thunder_c)')} | " + " | ".join(cell(r, p) for p in peers.names) + " |")

        def faster_floor(r):
            c = [f for f in ("GEMM torch.matmul", "GEMM oneDNN (thunder_c)") if f in r.times]
            return min(c, key=lambda f: statistics.median(r.times[f])) if c else None
        ratio_table(gemm, peers, faster_floor)
    ov = [r for r in results if r.section == "overhead"]
    if ov:
        print("\n### Cached-call overhead, f32[4] inputs (us per call: min / median / max)\n")
        print("| function | " + " | ".join(labels) + " | " + " | ".join(
            f"{PEER_LABEL[p]} / thunder-c" for p in peers.names if p != "thunder_c") + " |")
        print("|---" * (1 + len(labels) + len([p for p in peers.names if p != "thunder_c"])) + "|")
        for r in ov:
            print(f"| {r.name} | " + " | ".join(cell(r, p) for p in peers.names) + " | " + " | ".join(
                ratio(r, p, "thunder_c") for p in peers.names if p != "thunder_c") + " |")
    comp = [r for r in results if r.section == "compile"]
    if comp:
        cp = [p for p in peers.names if p != "eager"]
        print("\n### Compile time: a new jit object's first call (trace + compile + one run), ms: "
              "min / median / max\n")
        print("| function | dtype | shape | cache | " + " | ".join(PEER_LABEL[p] for p in cp) + " |")
        print("|---" * (4 + len(cp)) + "|")
        for r in comp:
            for phase in ("cold", "warm"):
                cells = []
                for p in cp:
                    st = r.status.get(p)
                    cells.append(st if st else (fmt3(r.times[p + " " + phase], "ms") if p + " " + phase in r.times
                                                else "—"))
                print(f"| {r.name} | {r.dtype} | {r.shape} | {phase} | " + " | ".join(cells) + " |")


def ratio_table(rows, peers, floor_of):
    others = [p for p in peers.names if p != "thunder_c"]
    print("\nRatios of medians (ratio of minimums in parentheses): each peer / the floor, and each peer / "
          "thunder-c (> 1: thunder-c is faster).\n")
    print("| workload | dtype | floor | " + " | ".join(f"{PEER_LABEL[p]} / floor" for p in peers.names) + " | "
          + " | ".join(f"{PEER_LABEL[p]} / thunder-c" for p in others) + " |")
    print("|---" * (3 + len(peers.names) + len(others)) + "|")
    for r in rows:
        f = floor_of(r)
        fl = f"{f} {statistics.median(r.times[f]):.2f} ms" if f else "—"
        print(f"| {r.name} | {r.dtype} | {fl} | " + " | ".join(ratio(r, p, f) if f else "—" for p in peers.names)
              + " | " + " | ".join(ratio(r, p, "thunder_c") for p in others) + " |")


def print_first_calls(results, peers):
    rows = [r for r in results if r.section in ("mem", "gemm", "overhead") and r.first]
    if not rows:
        return
    cp = [p for p in peers.names if p != "eager"]
    print("\n### First calls of the timed rows (trace + compile + one run, s) and the largest error "
          "against eager (relative to the largest magnitude; bf16 rows that differ from eager beyond the "
          "tolerance: also against the float32 computation)\n")
    print("The first calls use the on-disk caches as they are ($TORCHINDUCTOR_CACHE_DIR, "
          "$XDG_CACHE_HOME/thunder-c; Thunder has none), so they are cold only in a machine's first run; "
          "the compile rows time cold and warm compiles.\n")
    print("| workload | dtype | " + " | ".join(PEER_LABEL[p] for p in cp) + " |")
    print("|---" * (2 + len(cp)) + "|")
    for r in rows:
        cells = []
        for p in cp:
            st = r.status.get(p)
            if st and st.startswith("error"):
                cells.append("error")
            elif p in r.first and r.first[p] is not None:
                c = f"{r.first[p]:.2f} s, err {r.err.get(p, float('nan')):.1e}"
                if p in r.err32:
                    c += f" (vs float32 {r.err32[p][0]:.1e}, eager's {r.err32[p][1]:.1e})"
                cells.append(c + (" **MISMATCH**" if st else ""))
            else:
                cells.append("—")
        print(f"| {r.name} | {r.dtype} | " + " | ".join(cells) + " |")


# ---- main ---------------------------------------------------------------------------------------------------------

def main():
    a = ARGS
    t_start = time.perf_counter()
    torch.set_num_threads(a.threads)
    thunder_c.set_num_threads(a.threads)
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(256, getattr(torch._dynamo.config, knob)))
    thunder_mod, shimmed, thunder_err = (None, [], "skipped (--skip-peer thunder)")
    if "thunder" in a.peers:
        thunder_mod, shimmed, thunder_err = import_thunder()
    peers = Peers(a.peers, thunder_mod, thunder_err)
    floors = Floors(a.build)

    flags = cpu_flags()
    blas, mkl, dnnl = torch_blas()
    la = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print("## bench_peers — thunder-c against PyTorch eager, torch.compile and Lightning Thunder\n")
    print(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; load average at start {la}")
    print(f"- command: `{' '.join(shlex.quote(s) for s in [os.path.relpath(sys.executable)] + sys.argv)}`")
    print(f"- CPU: {cpu_model()}, {os.cpu_count()} CPUs; flags: "
          + ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")))
    print(f"- threads: {a.threads} for every peer (torch.set_num_threads -> {torch.get_num_threads()}, "
          f"thunder_c.set_num_threads -> {thunder_c.get_num_threads()}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']})")
    print(f"- torch {torch.__version__} (BLAS_INFO={blas}, {mkl}, {dnnl}; CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}); torchao {pkg_version('torchao')}; "
          f"lightning-thunder {pkg_version('lightning-thunder')}; thunder-c GEMMs: {debian_dnnl()}; "
          f"Python {platform.python_version()}")
    if "thunder" in a.peers:
        if thunder_mod is not None:
            ex = ", ".join(e.name for e in thunder_mod.get_default_executors())
            print(f"- Lightning Thunder {thunder_mod.__version__} imported with shims: {'; '.join(shimmed) or 'none'}; "
                  f"default executors: {ex}")
        else:
            print(f"- Lightning Thunder {pkg_version('lightning-thunder')} failed to import ({thunder_err}); "
                  f"shims tried: {'; '.join(shimmed) or 'none'}")
    print(f"- rounds: {a.rounds} ({a.gpt2_rounds} for the GPT-2 and training rows) after a warm-up round; "
          f"skipped peers: {', '.join(p for p in PEERS if p not in a.peers) or 'none'}")
    sys.stdout.flush()

    results = []
    log(f"bench_peers: peers {', '.join(a.peers)}; workloads {', '.join(a.only)}")
    run_mem(a, peers, floors, results)
    run_gpt2(a, peers, results)
    run_train(a, peers, results)
    run_overhead(a, peers, results)
    run_compile(a, peers, results)

    print_tables(results, peers)
    print_first_calls(results, peers)
    if peers.first_torch_compile_s is not None:
        print(f"\nThe process's first torch.compile call (dynamo and Inductor start-up included) took "
              f"{peers.first_torch_compile_s:.1f} s.")
    print(f"\nWall time {time.perf_counter() - t_start:.0f} s; load average at the end "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}.")


if __name__ == "__main__":
    main()
