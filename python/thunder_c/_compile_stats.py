"""Compilation statistics of a jitted function: thunder_c.compile_stats(jfn).

The C cache (csrc/jit.c) counts hits on its fast path and calls _Recorder.on_miss on every miss, before
it traces. A miss is explained by describing the call as the cache key sees it — each input tensor's
dtype, shape, strides and requires_grad, the values of the other arguments, the parameters and buffers
of a module, the submodules' training flags, the grad and autocast state — and comparing that with the
description of each compiled entry: the closest entry's differences are the reason. Describing runs
only on misses, which trace and compile, so it costs nothing on the cached path.
"""
import dataclasses
import inspect
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

    def __repr__(self):
        return f"thunder_c.config(recompile_limit={self.recompile_limit!r})"


config = _Config()


@dataclasses.dataclass(frozen=True)
class CompileStats:
    """What thunder_c.compile_stats(jfn) returns: a snapshot of the jitted function's cache.

    calls: calls that reached the cache (cache_hits + cache_misses); cache_hits: calls that reused a
    compiled program; cache_misses: calls that traced and compiled; entries: compiled programs held now;
    miss_reasons: one line per miss, in order ("first call", or what differed from the closest compiled
    entry: "x: shape f32[8, 768] -> f32[16, 768]")."""

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


def _describe_value(v, name, out, depth=0):
    """Appends (name, what, description) rows for value v: tensors by metadata, containers by their items,
    numbers, strings and None by value, other objects by type and identity."""
    if depth > 64:
        return
    if isinstance(v, torch.Tensor):
        shape = tuple(v.shape)
        out.append((name, "shape", f"{_dtype_name(v.dtype)}{list(shape)}"))
        if v.device.type != "cpu":
            out.append((name, "device", str(v.device)))
        st = tuple(v.stride()) if v.layout == torch.strided else ()
        # strides of size-1 dims are not in the key
        norm = tuple(s for s, n in zip(st, shape) if n != 1)
        if norm != tuple(s for s, n in zip(_contiguous_strides(shape), shape) if n != 1):
            out.append((name, "strides", f"strides {st}"))
        else:
            out.append((name, "strides", "contiguous"))
        out.append((name, "requires_grad", f"requires_grad={v.requires_grad}"))
    elif isinstance(v, (tuple, list)):
        out.append((name, "length", f"{type(v).__name__} of {len(v)}"))
        for i, x in enumerate(v):
            _describe_value(x, f"{name}[{i}]", out, depth + 1)
    elif isinstance(v, dict):
        out.append((name, "keys", f"dict with keys {list(v)!r}"))
        for k, x in v.items():
            _describe_value(x, f"{name}[{k!r}]", out, depth + 1)
    elif v is None or isinstance(v, (bool, int, float, str, torch.dtype, torch.device)):
        out.append((name, "value", f"{type(v).__name__} {v!r}"))
    else:
        out.append((name, "object", f"{type(v).__name__} object at {id(v):#x}"))


def _arg_names(fn, args, kwargs):
    """Names for the call's arguments: the function's parameter names where they bind, else args[i]."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"args[{i}]", a) for i, a in enumerate(args)] + [(k, v) for k, v in kwargs.items()]
    named = []
    for k, v in bound.arguments.items():
        kind = inspect.signature(target).parameters[k].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            named += [(f"{k}[{i}]", x) for i, x in enumerate(v)]
        elif kind == inspect.Parameter.VAR_KEYWORD:
            named += list(v.items())
        else:
            named.append((k, v))
    return named


def describe_call(fn, args, kwargs):
    """The call as the cache key sees it: a tuple of (name, what, description) rows."""
    rows = [("torch", "grad mode", f"grad {'enabled' if torch.is_grad_enabled() else 'disabled'}"),
            ("torch", "autocast", f"autocast(cpu) {'on, ' + str(torch.get_autocast_dtype('cpu')) if torch.is_autocast_enabled('cpu') else 'off'}"),
            ("torch", "default dtype", f"default dtype {torch.get_default_dtype()}")]
    for name, v in _arg_names(fn, args, kwargs or {}):
        _describe_value(v, name, rows)
    if isinstance(fn, torch.nn.Module):
        for name, t in list(fn.named_parameters(remove_duplicate=False)) + list(fn.named_buffers(remove_duplicate=False)):
            _describe_value(t, name, rows)
        for name, sub in fn.named_modules():
            rows.append((name or "the module", "training", f"training={sub.training}"))
    # aliasing between input tensors (as the key records it)
    seen = {}
    tensors = []

    def collect(v, name, depth=0):
        if isinstance(v, torch.Tensor):
            tensors.append((name, v))
        elif isinstance(v, (tuple, list)) and depth < 64:
            for i, x in enumerate(v):
                collect(x, f"{name}[{i}]", depth + 1)
        elif isinstance(v, dict) and depth < 64:
            for k, x in v.items():
                collect(x, f"{name}[{k!r}]", depth + 1)

    for name, v in _arg_names(fn, args, kwargs or {}):
        collect(v, name)
    for name, t in tensors:
        try:
            ptr = t.untyped_storage().data_ptr()
        except RuntimeError:
            continue
        if t.numel() and ptr in seen:
            rows.append((name, "aliasing", f"shares memory with {seen[ptr]}"))
        elif t.numel():
            seen[ptr] = name
    return tuple(rows)


def _differences(new, old):
    """What changed from old to new: one phrase per (name, what) whose description differs."""
    o = {(n, w): d for n, w, d in old}
    nk = {(n, w) for n, w, _ in new}
    diffs = []
    for n, w, d in new:
        if (n, w) not in o:
            if w != "aliasing":
                diffs.append(f"{n}: new {w} ({d})")
            else:
                diffs.append(f"{n}: {d}")
        elif o[(n, w)] != d:
            diffs.append(f"{n}: {w} {o[(n, w)]} -> {d}" if w in ("shape", "value") else f"{n}: {o[(n, w)]} -> {d}")
    for n, w, d in old:
        if (n, w) not in nk:
            diffs.append(f"{n}: no longer shares memory" if w == "aliasing" else f"{n}: absent now (was {d})")
    return diffs


class _Recorder:
    """Per jitted function: the descriptions of its compiled entries and the reason of each miss. The C
    cache calls on_miss(fn, args, kwargs, why) on a miss (why: a reason only C knows, else None) and
    on_entry(desc) once the new entry is in the cache; on_clear() when the cache is emptied."""

    def __init__(self, qualname):
        self.qualname = qualname
        self.entries: List[tuple] = []
        self.reasons: List[str] = []
        self.warned = False

    def on_miss(self, fn, args, kwargs, why: Optional[str]):
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
        limit = config.recompile_limit
        recompiles = len(self.reasons) - 1
        if limit and recompiles >= limit and not self.warned:
            self.warned = True
            warnings.warn(f"thunder_c.jit({self.qualname}) compiled again {recompiles} times "
                          f"(thunder_c.config.recompile_limit = {limit}); the last miss: {why}. "
                          f"thunder_c.compile_stats() lists every miss's reason", RecompileWarning, stacklevel=2)
        return desc

    def on_entry(self, desc):
        self.entries.append(desc)

    def on_clear(self):
        self.entries.clear()


def compile_stats(jfn):
    """The cache statistics of a jitted function (thunder_c.jit's result): a CompileStats."""
    from . import _C
    j = getattr(jfn, "_thunder_jit", jfn)
    rec = _C._stats_recorder(j)
    hits, misses = _C.cache_hits(j), _C.cache_misses(j)
    return CompileStats(hits + misses, hits, misses, len(rec.entries), tuple(rec.reasons))
