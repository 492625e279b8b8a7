"""Compilation statistics of a jitted function: thunder_c.compile_stats(jfn).

The C cache (csrc/jit.c) counts hits on its fast path and calls _Recorder.on_miss on every miss, before
it traces. A miss is explained by describing the call as the cache key sees it — each input tensor's
dtype, shape, strides and requires_grad, the values of the other arguments, the parameters and buffers
of a module, the submodules' training flags, the grad and autocast state — and comparing that with the
description of each compiled entry: the closest entry's differences are the reason. Describing runs
only on misses, which trace and compile, so it costs nothing on the cached path.
"""
import collections
import dataclasses
import inspect
import math
import os
import struct
import sys
import warnings
from typing import List, Optional, Tuple

import torch


class RecompileWarning(UserWarning):
    """A jitted function compiled again more times than thunder_c.config.recompile_limit."""


class _Config:
    """thunder_c.config: process-wide settings.

    recompile_limit: after this many recompilations of one jitted function (misses after its first
    compilation), thunder_c warns once, with the reason of the last miss (RecompileWarning; torch._dynamo
    warns at its recompile_limit, 8, in the same way). 0 or None: never warn."""

    def __init__(self):
        self.recompile_limit = 8

    def __setattr__(self, name, value):
        if name != "recompile_limit":
            raise AttributeError(f"thunder_c.config has no setting {name!r} (it has: recompile_limit)")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"thunder_c.config.recompile_limit: expected None or an int >= 0, but got {value!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        raise AttributeError(f"thunder_c.config.{name} cannot be deleted (set it to None to turn it off)")

    def __repr__(self):
        return f"thunder_c.config(recompile_limit={self.recompile_limit!r})"


config = _Config()


@dataclasses.dataclass(frozen=True)
class CompileStats:
    """What thunder_c.compile_stats(jfn) returns: a snapshot of the jitted function's cache.

    calls: calls that reached the cache (cache_hits + cache_misses); cache_hits: calls that reused a
    compiled program; cache_misses: calls that traced and compiled; entries: compiled programs the cache
    holds now; miss_reasons: one line per miss, in order, for the last MAX_REASONS misses ("first call",
    or what differed from the closest compiled entry: "x: shape f32[8, 768] -> f32[16, 768]")."""

    calls: int
    cache_hits: int
    cache_misses: int
    entries: int
    miss_reasons: Tuple[str, ...]

    def __str__(self):
        lines = [f"{self.calls} calls: {self.cache_hits} cache hits, {self.cache_misses} misses, "
                 f"{self.entries} compiled entries"]
        lines += [f"  miss {i + 1}: {r}" for i, r in enumerate(self.miss_reasons)]
        return "\n".join(lines)


MAX_REASONS = 10000  # miss reasons kept per jitted function (the counters count every miss)


def _dtype_name(dt):
    return {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
            torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
            torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128"}.get(dt, str(dt).replace("torch.", ""))


def _contiguous_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def _scalar(v):
    """A number, string or None as the key tells them apart: floats by their bits (nan from -nan)."""
    if isinstance(v, float) and math.isnan(v):
        return f"float {'-' if math.copysign(1.0, v) < 0 else ''}nan (bits {struct.pack('>d', v).hex()})"
    if isinstance(v, str):
        return f"str {str.__repr__(v)}"  # str's own repr: a subclass's cannot raise
    if isinstance(v, (bool, int)):
        return f"{type(v).__name__} {int.__repr__(v)}"
    if isinstance(v, float):
        return f"float {float.__repr__(v)}"
    return f"{type(v).__name__} {v!r}"


def _describe_value(v, name, out, tensors, depth=0):
    """Appends (name, what, description) rows for value v — tensors by metadata, containers by their
    items, numbers, strings and None by value, other objects by type and identity — and each tensor,
    with its name, to tensors."""
    if depth > 64:
        return
    if isinstance(v, torch.Tensor):
        tensors.append((name, v))
        shape = tuple(v.shape)
        out.append((name, "shape", f"{_dtype_name(v.dtype)}{list(shape)}"))
        if v.device.type != "cpu":
            out.append((name, "device", str(v.device)))
        st = tuple(v.stride()) if v.layout == torch.strided else ()
        norm = tuple(s for s, n in zip(st, shape) if n != 1)  # strides of size-1 dims are not in the key
        contiguous = norm == tuple(s for s, n in zip(_contiguous_strides(shape), shape) if n != 1)
        out.append((name, "strides", "contiguous" if contiguous else f"strides {st}"))
        out.append((name, "requires_grad", f"requires_grad={v.requires_grad}"))
    elif isinstance(v, (tuple, list)):
        out.append((name, "length", f"{type(v).__name__} of {len(v)}"))
        for i, x in enumerate(v):
            _describe_value(x, f"{name}[{i}]", out, tensors, depth + 1)
    elif isinstance(v, dict):
        keys = [_scalar(k) if k is None or isinstance(k, (bool, int, float, str)) else f"{type(k).__name__} at {id(k):#x}"
                for k in v]  # other keys (tensors too) by identity, as the key guards them
        out.append((name, "keys", f"dict with keys [{', '.join(keys)}]"))
        for k, kd in zip(v, keys):
            _describe_value(v[k], f"{name}[{kd}]", out, tensors, depth + 1)
    elif v is None or isinstance(v, (bool, int, float, str)):
        out.append((name, "value", _scalar(v)))
    elif isinstance(v, (torch.dtype, torch.device)):
        out.append((name, "value", f"{type(v).__name__} {v}"))
    else:
        out.append((name, "object", f"{type(v).__name__} object at {id(v):#x}"))


def _arg_names(fn, args, kwargs):
    """Names for the call's arguments: the function's parameter names where they bind (a Trace's input
    names), else args[i]; keyword arguments by their keyword."""
    from . import _C
    if isinstance(fn, _C.Trace):
        names = list(fn.input_names)
        return [(names[i] if i < len(names) else f"args[{i}]", a) for i, a in enumerate(args)]
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        sig = inspect.signature(target)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"args[{i}]", a) for i, a in enumerate(args)] + [(k, v) for k, v in kwargs.items()]
    named = []
    for k, v in bound.arguments.items():
        kind = sig.parameters[k].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            named += [(f"{k}[{i}]", x) for i, x in enumerate(v)]
        elif kind == inspect.Parameter.VAR_KEYWORD:
            named += list(v.items())
        else:
            named.append((k, v))
    return named


def _byte_range(t):
    """[lo, hi) bytes tensor t can touch (lo == hi when it is empty), as the cache key computes it."""
    if t.numel() == 0 or t.layout != torch.strided:
        return None
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    lo = t.data_ptr()
    return lo, lo + (span + 1) * t.element_size()


def _aliasing_rows(tensors):
    """Rows naming, for each tensor whose bytes overlap an earlier one's, the first of its overlapping run
    (as the key's jit_alias_roots groups them)."""
    spans = sorted(((r, i) for i, (_, t) in enumerate(tensors) if (r := _byte_range(t))), key=lambda x: (x[0][0], x[1]))
    rows, a = [], 0
    while a < len(spans):
        b, hi, lowest = a + 1, spans[a][0][1], spans[a][1]
        while b < len(spans) and spans[b][0][0] < hi:
            hi, lowest = max(hi, spans[b][0][1]), min(lowest, spans[b][1])
            b += 1
        for (_, i) in spans[a:b]:
            if i != lowest:
                rows.append((tensors[i][0], "aliasing", f"shares memory with {tensors[lowest][0]}"))
        a = b
    return rows


def describe_call(fn, args, kwargs):
    """The call as the cache key sees it: a tuple of (name, what, description) rows."""
    kwargs = kwargs or {}
    gpu_on = torch.is_autocast_enabled()  # the key's five: default dtype, autocast cpu/gpu flags and dtypes, grad
    rows = [("torch", "default dtype", f"default dtype {torch.get_default_dtype()}"),
            ("torch", "autocast", f"autocast(cpu) {'on' if torch.is_autocast_enabled('cpu') else 'off'}"),
            ("torch", "autocast dtype", f"autocast(cpu) dtype {torch.get_autocast_dtype('cpu')}"),
            ("torch", "autocast gpu", f"autocast(cuda) {'on' if gpu_on else 'off'}"),
            ("torch", "autocast gpu dtype", f"autocast(cuda) dtype {torch.get_autocast_dtype('cuda')}"),
            ("torch", "grad mode", f"grad {'enabled' if torch.is_grad_enabled() else 'disabled'}"),
            ("the call", "arguments", f"{len(args)} positional, keywords {list(kwargs)}")]
    tensors = []
    for name, v in _arg_names(fn, args, kwargs):
        _describe_value(v, name, rows, tensors)
    if isinstance(fn, torch.nn.Module):
        for kind, items in (("parameter", fn.named_parameters(remove_duplicate=False)),
                            ("buffer", fn.named_buffers(remove_duplicate=False))):
            for name, t in items:
                _describe_value(t, f"{kind} {name}", rows, tensors)
        for name, sub in fn.named_modules():
            rows.append((f"submodule {name}" if name else "the module", "training", f"training={sub.training}"))
    return tuple(rows + _aliasing_rows(tensors))


def _differences(new, old):
    """What changed from old to new: one phrase per (name, what) whose description differs."""
    o = {(n, w): d for n, w, d in old}
    nk = {(n, w) for n, w, _ in new}
    diffs = []
    for n, w, d in new:
        if (n, w) not in o:
            diffs.append(f"{n}: {d}" if w == "aliasing" else f"{n}: new {w} ({d})")
        elif o[(n, w)] != d:
            diffs.append(f"{n}: {w} {o[(n, w)]} -> {d}" if w in ("shape", "value") else f"{n}: {o[(n, w)]} -> {d}")
    for n, w, d in old:
        if (n, w) not in nk:
            diffs.append(f"{n}: no longer shares memory" if w == "aliasing" else f"{n}: absent now (was {d})")
    return diffs


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_MODULE_FILE = os.path.abspath(torch.nn.modules.module.__file__)


def _caller_stacklevel():
    """The stacklevel of warnings.warn, called from on_miss, that names the user's line: past the frames
    of this package and of nn.Module's __call__ (a ThunderModule's call goes through both)."""
    level, f = 2, sys._getframe(2)  # 1: on_miss, 2: its caller
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not (path.startswith(_PACKAGE_DIR + os.sep) or path == _MODULE_FILE):
            return level
        f, level = f.f_back, level + 1
    return 2


class _Recorder:
    """Per jitted function: the descriptions of its compiled entries and the reason of each miss. The C
    cache calls on_miss(fn, args, kwargs, why, warn) on a miss (why: a reason only C knows, else None;
    warn: whether the miss counts toward recompile_limit) and on_entry(desc) once the new entry is in the
    cache; on_clear() when the cache is emptied."""

    def __init__(self, qualname):
        self.qualname = qualname
        self.entries: List[tuple] = []
        self.reasons = collections.deque(maxlen=MAX_REASONS)
        self.misses = 0
        self.warned = False

    def on_miss(self, fn, args, kwargs, why: Optional[str], warn=True):
        try:
            desc = describe_call(fn, args, kwargs)
        except Exception as e:  # a description never fails the call it explains
            desc, why = (), why or f"(the call could not be described: {type(e).__name__}: {e})"
        if why is None:
            if not self.entries:
                why = "first call"
            else:
                diffs = min((_differences(desc, old) for old in reversed(self.entries)), key=len)  # ties: the newest
                why = "; ".join(diffs) if diffs else "a value the function reads besides its arguments " \
                    "changed (a closure variable, a global, a module attribute or a captured tensor)"
        self.reasons.append(why)
        self.misses += 1
        limit = config.recompile_limit
        recompiles = self.misses - 1
        if warn and limit and recompiles >= limit and not self.warned:
            self.warned = True
            warnings.warn(f"thunder_c.jit({self.qualname}) compiled again {recompiles} times "
                          f"(thunder_c.config.recompile_limit = {limit}); the last miss: {why}. "
                          f"thunder_c.compile_stats() lists every miss's reason", RecompileWarning,
                          stacklevel=_caller_stacklevel())
        return desc

    def on_entry(self, desc):
        if desc in self.entries:  # the same call compiled again (a captured tensor changed): one entry
            self.entries.remove(desc)
        self.entries.append(desc)
        del self.entries[:-MAX_REASONS]

    def on_clear(self):
        self.entries.clear()


def compile_stats(jfn):
    """The cache statistics of a jitted function (thunder_c.jit's result): a CompileStats."""
    from . import _C
    j = getattr(jfn, "_thunder_jit", jfn)
    rec = _C._stats_recorder(j)
    hits, misses = _C.cache_hits(j), _C.cache_misses(j)
    return CompileStats(hits + misses, hits, misses, _C._cache_entries(j), tuple(rec.reasons))
