"""PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations.op_db) run through
thunder_c: which OpInfos thunder_c maps, and the check of one sample. Shared by test_opinfo.py and
opinfo_report.py (which writes docs/ops.md).

Coverage. An OpInfo is covered when its `op` (or its `method_variant`, for an OpInfo whose op is a
wrapper) is one of the torch callables named by the aliases of thunder_c's op table (thunder_c._C.ops():
"torch.add", "Tensor.add", "torch.nn.functional.gelu", ... resolved against torch).

Checks. For each of DTYPES the OpInfo supports on the CPU, every sample `sample_inputs('cpu', dtype)`
yields (torch's RNG seeded first: deterministic; OPINFO_MAX_SAMPLES=N keeps the first N) is run through
each spelling of the op thunder_c maps (see variants(): the function, its method, the OpInfo's aliases)
    thunder_c.jit(lambda *a, **k: fn(*a, **k))(sample.input, *sample.args, **sample.kwargs)
and compared with the same call in eager PyTorch on clones of the inputs: the same structure, dtypes and
shapes, values by torch.testing.assert_close (NaN == NaN) with assert_close's tolerances for the output
dtype, loosened by the OpInfo's toleranceOverride decorators where it has them. Outcomes:
    pass         the same result, or eager and thunder_c both raise. A bf16/f16 value outside the
                 tolerance passes only if it is, element by element, at least as close to the float64
                 result as eager's (_as_accurate; counted apart as "passed by reference")
    unsupported  thunder_c raises NotImplementedError (or the extension's TypeError for a Python
                 argument type it cannot hand to the core, torch.memory_format) where eager does not:
                 reported, not a failure
    failure      anything else (another value, dtype or shape; another exception; no exception where
                 eager raises)
Two limits of the extension (not the core) are worked around here, each probed so that it switches
itself off once the extension handles the case (see _workarounds).
"""
import os
import pathlib
import sys
import types
import unittest
import warnings

import torch

# torch.testing._internal.common_utils (imported by common_methods_invocations) does `import
# expecttest`, a test-only PyPI package that Debian's python3-torch does not depend on and Debian does
# not package. op_db needs only the two names below from it (common_utils subclasses
# expecttest.TestCase and reads expecttest.ACCEPT), so a minimal stand-in is installed when the real
# module is missing.
try:
    import expecttest  # noqa: F401
except ImportError:
    _stub = types.ModuleType("expecttest")
    _stub.TestCase = unittest.TestCase
    _stub.ACCEPT = False
    sys.modules["expecttest"] = _stub

_HERE = pathlib.Path(__file__).resolve().parent
_BUILD = pathlib.Path(os.environ.get("THUNDER_BUILD_DIR", _HERE.parents[1] / "build"))
if str(_BUILD / "python") not in sys.path:
    sys.path.insert(0, str(_BUILD / "python"))

import thunder_c  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride  # noqa: E402

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool)
# What test_opinfo.py ran in this process, for the summary conftest.py prints at the end of the run:
# covered / total OpInfos, and {opinfo id: run_opinfo's result}.
SESSION = {"covered": 0, "total": 0, "results": {}}
# Samples per OpInfo and dtype: all of them (the whole run takes seconds); OPINFO_MAX_SAMPLES=N keeps
# the first N each OpInfo yields, for a quicker run.
MAX_SAMPLES = int(os.environ.get("OPINFO_MAX_SAMPLES", "0")) or None


def _resolve(spelling):
    """"torch.add", "Tensor.add", "torch.Tensor.add", "torch.nn.functional.gelu" -> the callable."""
    if spelling.startswith("torch.Tensor."):
        obj, path = torch.Tensor, spelling[len("torch.Tensor."):]
    elif spelling.startswith("Tensor."):
        obj, path = torch.Tensor, spelling[len("Tensor."):]
    elif spelling.startswith("torch."):
        obj, path = torch, spelling[len("torch."):]
    else:
        return None
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def thunder_callables():
    """{torch callable: ltorch qualname} for every spelling in thunder_c's op table."""
    table = {}
    for qualname, aliases, _schema, _in_place in thunder_c._C.ops():
        for spelling in filter(None, aliases.split("|")):
            f = _resolve(spelling)
            if f is not None:
                try:
                    table.setdefault(f, qualname)
                except TypeError:  # an unhashable attribute: not a callable
                    pass
    return table


def opinfo_id(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _lookup(table, f):
    try:
        return table.get(f) if f is not None else None
    except TypeError:
        return None


# OpInfos whose `op` is a lambda wrapping the torch function (its arguments reordered), by id: the
# function they call, looked up in thunder_c's table like `op`.
WRAPPED = {"nn.functional.embedding_bag": torch.nn.functional.embedding_bag,
           "nn.functional.embedding": torch.nn.functional.embedding,
           "einsum": torch.einsum}


def classify():
    """(covered, uncovered): covered is [(id, opinfo, qualname)], uncovered is [(id, opinfo)]."""
    table = thunder_callables()
    covered, uncovered = [], []
    for op in op_db:
        q = (_lookup(table, op.op) or _lookup(table, op.method_variant)
             or _lookup(table, WRAPPED.get(opinfo_id(op))))
        if q:
            covered.append((opinfo_id(op), op, q))
        else:
            uncovered.append((opinfo_id(op), op))
    return covered, uncovered


# torch.testing.assert_close's defaults, which an OpInfo's overrides may only loosen here. bf16's
# rtol 1.6e-2 is about two units in its last place (8 significant bits); where PyTorch's own bf16
# kernel is further off than that, _as_accurate decides (see there).
_DEFAULT_TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.bfloat16: (1.6e-2, 1e-5),
                torch.float16: (1e-3, 1e-5)}


# Loosened where thunder_c's kernel sums in another order than PyTorch's, legitimately: float32
# conv_transpose3d's samples sum 108 products into outputs near 900 (PyTorch's im2col/col2im kernel vs
# oneDNN's deconvolution), so both differ from the float64 result by ~1e-4 where an output cancels to
# near zero, beyond assert_close's float32 default atol.
_TOL_OVERRIDES = {("nn.functional.conv_transpose3d", torch.float32): (1.3e-6, 5e-4)}


def tolerances(op, dtype, out_dtype):
    """(rtol, atol) for an output of `out_dtype` of a sample of `dtype`: each the largest of
    assert_close's default for out_dtype and the OpInfo's toleranceOverride / precisionOverride
    decorators for `dtype` on the CPU (any test). {} = exact (integer and bool outputs)."""
    if out_dtype not in _DEFAULT_TOL:
        return {}
    rtol, atol = _DEFAULT_TOL[out_dtype]
    if (opinfo_id(op), out_dtype) in _TOL_OVERRIDES:
        rtol, atol = _TOL_OVERRIDES[(opinfo_id(op), out_dtype)]
    for dec in op.decorators or ():
        if getattr(dec, "device_type", None) not in (None, "cpu"):
            continue
        for d in getattr(dec, "decorators", ()) or ():
            if isinstance(d, toleranceOverride) and dtype in d.d:
                rtol, atol = max(rtol, d.d[dtype].rtol), max(atol, d.d[dtype].atol)
            elif isinstance(d, precisionOverride) and dtype in d.d:  # an atol
                atol = max(atol, d.d[dtype])
    return dict(rtol=rtol, atol=atol)


def dtypes_of(op):
    sup = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in sup]


def samples(op, dtype):
    torch.manual_seed(0)
    out = []
    for s in op.sample_inputs("cpu", dtype, requires_grad=False):
        out.append(s)
        if MAX_SAMPLES and len(out) == MAX_SAMPLES:
            break
    return out


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(e) for e in x) if not hasattr(x, "_fields") else type(x)(*(_clone(e) for e in x))
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _flatten(x, out):
    if isinstance(x, (list, tuple)):
        out.append(("seq", len(x)))
        for e in x:
            _flatten(e, out)
    else:
        out.append(x)
    return out


def describe(sample):
    def d(x):
        if isinstance(x, torch.Tensor):
            return f"Tensor{tuple(x.shape)}:{str(x.dtype)[6:]}" + ("" if x.is_contiguous() else "(nc)")
        if isinstance(x, (list, tuple)):
            return ("[" if isinstance(x, list) else "(") + ", ".join(d(e) for e in x) + ("]" if isinstance(x, list) else ")")
        return repr(x)
    parts = [d(sample.input)] + [d(a) for a in sample.args] + [f"{k}={d(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


class SampleFailure(AssertionError):
    pass


def _probe(f, *args):
    try:
        thunder_c.jit(f)(*args)
        return True
    except Exception:  # noqa: BLE001
        return False


# Workarounds for two limits of the thunder_c extension (python/thunder_c/csrc), not of the core; each
# is probed once, so it switches itself off when the extension handles the case:
#  - bool tensors cannot cross the Python boundary: the extension passes tensors by DLPack, and
#    PyTorch 1.13's to_dlpack/from_dlpack reject bool ("Bool type is not supported by dlpack",
#    "Unsupported code 6"). Bool inputs then travel as uint8 views (x.view(torch.uint8), strides kept)
#    made bool again inside the jitted function (.bool()), and bool outputs leave as uint8 (viewed as
#    bool again outside).
#  - an unbound Tensor method (torch.Tensor.sum(x), which is what OpInfo.method_variant is) called on
#    a TensorProxy raises TypeError (the descriptor check precedes __torch_function__ for a
#    non-Tensor); the method variants are then called bound (x.sum()).
_BOOL_OK = None
_UNBOUND_OK = None


def _workarounds():
    global _BOOL_OK, _UNBOUND_OK
    if _BOOL_OK is None:
        _BOOL_OK = _probe(lambda a: a & a, torch.ones(2, dtype=torch.bool))
        _UNBOUND_OK = _probe(lambda a: torch.Tensor.neg(a), torch.ones(2))
    return _BOOL_OK, _UNBOUND_OK


def _map_tensors(x, f):
    if isinstance(x, (torch.Tensor, thunder_c.TensorProxy)):
        return f(x)
    if isinstance(x, (list, tuple)):
        if hasattr(x, "_fields"):
            return tuple(_map_tensors(e, f) for e in x)
        return type(x)(_map_tensors(e, f) for e in x)
    if isinstance(x, dict):
        return {k: _map_tensors(v, f) for k, v in x.items()}
    return x


def _jit_call(fn, args, kwargs):
    bool_ok, _ = _workarounds()
    if bool_ok:
        return thunder_c.jit(lambda *a, **k: fn(*a, **k))(*args, **kwargs)
    was_bool_in = []  # per tensor input, in _map_tensors order

    def to_u8(t):
        was_bool_in.append(t.dtype == torch.bool)
        return t.view(torch.uint8) if t.dtype == torch.bool else t

    args, kwargs = _map_tensors((args, kwargs), to_u8)
    was_bool_out = []  # per tensor output; filled while thunder_c traces inner (this first call)

    def inner(*a, **k):
        it = iter(was_bool_in)
        a, k = _map_tensors((a, k), lambda t: t.bool() if next(it) else t)
        out = fn(*a, **k)

        def to_u8_out(t):
            was_bool_out.append(t.dtype == torch.bool)
            return t.to(torch.uint8) if t.dtype == torch.bool else t
        return _map_tensors(out, to_u8_out)

    got = thunder_c.jit(inner)(*args, **kwargs)
    it = iter(was_bool_out)
    return _map_tensors(got, lambda t: t.view(torch.bool) if next(it) else t)


# Ops whose outputs are uninitialized memory: only dtype and shape are compared.
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided"}


def _extension_unsupported(e):
    """Missing features that surface as TypeError rather than NotImplementedError, counted as unsupported:
    - the extension's TypeError("...: an argument of type X is not supported by thunder_c") for Python
      objects it cannot hand to the core;
    - Tensor.to's positional non_blocking/copy form (x.to('cpu', torch.float64, True, True)): thunder-c
      keeps Lightning Thunder's signature of ltorch.to, which has no positional slots for them, so the
      binder rejects the call as too many positional arguments."""
    if not isinstance(e, TypeError):
        return False
    m = str(e)
    return ("an argument of type" in m and "is not supported by thunder_c" in m) or \
        m.startswith("ltorch.to() takes 3 positional arguments")


LOW_PRECISION = (torch.bfloat16, torch.float16)


def _as_accurate(got, want, index, fn, args, kwargs, tol):
    """For a low-precision output that differs from eager's beyond the tolerance: whether thunder_c's
    value is, element by element, at least as close to the float64 result (the same call with bf16/f16
    tensors and dtypes made float64) as eager's is, or within the tolerance of it. PyTorch's CPU kernels
    round some intermediates to bf16 (bf16 matmul accumulation; a / b rounded before trunc/floor;
    layer_norm's mean), so eager itself can be off by more than the tolerance where thunder_c, which
    computes in float32 and rounds once, is not."""
    def up(x):
        if isinstance(x, torch.Tensor) and x.dtype in LOW_PRECISION:
            return x.double()
        if isinstance(x, torch.dtype) and x in LOW_PRECISION:
            return torch.float64
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            return type(x)(up(e) for e in x)
        if isinstance(x, dict):
            return {k: up(v) for k, v in x.items()}
        return x
    try:
        with torch.no_grad():
            ref = _flatten(fn(*up(_clone(args)), **up(_clone(kwargs))), [])[index]
    except Exception:  # noqa: BLE001
        return False
    if not isinstance(ref, torch.Tensor) or ref.shape != want.shape or not ref.is_floating_point():
        return False
    ref = ref.double()
    g, w = got.double(), want.double()
    err_g = (g - ref).abs().nan_to_num(nan=float("inf"))
    err_w = (w - ref).abs().nan_to_num(nan=float("inf"))
    both_nan = g.isnan() & ref.isnan()
    bound = torch.maximum(err_w, tol["atol"] + tol["rtol"] * ref.abs())
    return bool(((err_g <= bound) | both_nan | (g == ref)).all())


def run_sample(op, fn, sample, dtype):
    """Runs one sample; returns "pass", "pass-reference" (a low-precision value accepted by
    _as_accurate) or ("unsupported", reason); raises SampleFailure."""
    args = (sample.input, *sample.args)
    kwargs = sample.kwargs
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # F.tanh / F.sigmoid deprecation (aliases of the OpInfos)
            want = fn(*_clone(args), **_clone(kwargs))
        eager_exc = None
    except Exception as e:  # noqa: BLE001 - PyTorch's own errors
        want, eager_exc = None, e
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _jit_call(fn, _clone(args), _clone(kwargs))
    except Exception as e:  # noqa: BLE001
        if eager_exc is not None:
            return "pass"
        if isinstance(e, NotImplementedError) or _extension_unsupported(e):
            return "unsupported", str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SampleFailure(f"thunder_c raised {type(e).__name__}: {e}") from e
    if eager_exc is not None:
        raise SampleFailure(f"eager raised {type(eager_exc).__name__}: {eager_exc}; thunder_c did not")
    g, w = _flatten(got, []), _flatten(want, [])
    if len(g) != len(w) or any(isinstance(a, tuple) != isinstance(b, tuple) or (isinstance(a, tuple) and a != b)
                               for a, b in zip(g, w)):
        raise SampleFailure(f"result structure differs: thunder_c {_struct(got)}, eager {_struct(want)}")
    outcome = "pass"
    for i, (a, b) in enumerate(zip(g, w)):
        if isinstance(b, tuple):
            continue
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise SampleFailure(f"output {i}: thunder_c gave {type(a).__name__}, eager a Tensor")
            if a.dtype != b.dtype:
                raise SampleFailure(f"output {i}: dtype {a.dtype}, eager {b.dtype}")
            if a.shape != b.shape:
                raise SampleFailure(f"output {i}: shape {tuple(a.shape)}, eager {tuple(b.shape)}")
            if op.name in UNINITIALIZED:
                continue
            try:
                torch.testing.assert_close(a, b, equal_nan=True, **tolerances(op, dtype, b.dtype))
            except AssertionError as e:
                if not (b.dtype in LOW_PRECISION and _as_accurate(a, b, i, fn, args, kwargs, tolerances(op, dtype, b.dtype))):
                    raise SampleFailure(f"output {i} ({b.dtype}): {e}") from None
                outcome = "pass-reference"
        else:
            if a != b and not (isinstance(a, float) and isinstance(b, float) and a != a and b != b):
                raise SampleFailure(f"output {i}: {a!r}, eager {b!r}")
    return outcome


def _struct(x):
    if isinstance(x, (list, tuple)):
        return type(x).__name__ + "[" + ", ".join(_struct(e) for e in x) + "]"
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)}"
    return type(x).__name__


_TABLE = None


def variants(op):
    """The callables to run for an OpInfo: op itself; its method variant when thunder_c maps that
    spelling too and op is not a wrapper of it (op itself mapped, and a different callable); and each
    of its aliases' function and method that thunder_c maps."""
    global _TABLE
    if _TABLE is None:
        _TABLE = thunder_callables()
    fns = [("op", _callable(op.op))]
    if (op.method_variant is not None and op.method_variant is not op.op and _lookup(_TABLE, op.op)
            and _lookup(_TABLE, op.method_variant)):
        fns.append(("method", _callable(op.method_variant)))
    for al in op.aliases:  # AliasInfo: other spellings of the same op (torch.arccos, Tensor.fix, ...)
        for kind, f in (("", al.op), (" method", al.method_variant)):
            if f is not None and _lookup(_TABLE, f):
                fns.append((f"alias {al.name}{kind}", _callable(f)))
    return fns


def _callable(f):
    """f, or for an unbound Tensor method (torch.Tensor.sum) when the extension cannot take those, a
    function that calls it bound (x.sum(...))."""
    name = getattr(f, "__name__", None)
    if _workarounds()[1] or not name or getattr(torch.Tensor, name, None) is not f:
        return f
    return lambda x, *a, **k: getattr(x, name)(*a, **k)


def run_opinfo(op):
    """All of an OpInfo's checks. Returns dict(passed, passed_reference (of passed: accepted by
    _as_accurate), unsupported, failures=[str], reasons={unsupported reason: count}, dtypes=[str])."""
    res = dict(passed=0, passed_reference=0, unsupported=0, failures=[], reasons={},
               dtypes=[str(d)[6:] for d in dtypes_of(op)])
    for dtype in dtypes_of(op):
        for si, sample in enumerate(samples(op, dtype)):
            for vname, fn in variants(op):
                try:
                    r = run_sample(op, fn, sample, dtype)
                except SampleFailure as e:
                    res["failures"].append(f"{vname} {str(dtype)[6:]} sample {si} {describe(sample)}: {e}")
                    continue
                if r in ("pass", "pass-reference"):
                    res["passed"] += 1
                    res["passed_reference"] += r == "pass-reference"
                else:
                    res["unsupported"] += 1
                    reason = r[1]
                    res["reasons"][reason] = res["reasons"].get(reason, 0) + 1
    return res
