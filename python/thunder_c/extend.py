"""thunder_c.extend — new operators and executors written in Python (Lightning Thunder's thunder.extend).

    ex = thunder_c.extend.OperatorExecutor("myex", version="0.1")
    thunder_c.extend.register_executor(ex)
    my_gelu = ex.register_operator("my_gelu", like=thunder_c.torch.gelu,
                                   fn=lambda a, *, approximate="none": torch.nn.functional.gelu(a))
    ex.register_implementation(thunder_c.torch.gelu, my_gelu, checker=lambda a, *, approximate: a.ndim == 2)
    jfn = thunder_c.jit(fn, executors=[ex, "blas", "eager"])

The work is the C core's (include/thunder/executor.h, reached through csrc/extend.c): an operator is a
registered prim recorded as `myex.my_gelu(...)`; an executor claims bound symbols at compile time (its
checker asked first) and runs the Python kernel on torch tensors that view the program's buffers. This
file turns Python signatures into the core's schemas and keeps the executors registered by name.
"""
import inspect
import typing
import collections.abc

import torch as _torch

from . import _C

__all__ = ["OperatorExecutor", "Symbol", "TensorProxy", "register_executor", "deregister_executor", "get_executor",
           "get_all_executors", "register_autocast_rule"]


class TensorProxy:
    """A tensor as a meta, checker or autocast rule sees it (shape, dtype, device; no values), and what
    a meta returns for each output: TensorProxy(like=a), TensorProxy(shape=(2, 3), dtype=torch.float32),
    or TensorProxy(like=a, dtype=torch.bfloat16)."""

    __slots__ = ("name", "shape", "dtype", "device")

    def __init__(self, name=None, *, like=None, shape=None, dtype=None, device=None):
        if like is not None:
            shape = like.shape if shape is None else shape
            dtype = like.dtype if dtype is None else dtype
            device = like.device if device is None else device
        if shape is None or dtype is None:
            raise TypeError("TensorProxy: give like= or both shape= and dtype=")
        self.name = name
        self.shape = _torch.Size(shape)
        self.dtype = dtype
        self.device = _torch.device("cpu" if device is None else device)

    @classmethod
    def _make(cls, name, shape, dtype, device):
        p = cls.__new__(cls)
        p.name, p.shape, p.dtype, p.device = name, _torch.Size(shape), dtype, device
        return p

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self):
        return f'<TensorProxy {self.name or "?"}: {self.device} {self.dtype} {list(self.shape)}>'


class Symbol:
    """An operator registered by OperatorExecutor.register_operator: call it inside a function compiled
    with thunder_c.jit and the trace records `<executor>.<name>(...)`."""

    __slots__ = ("name", "qualname", "executor", "schema", "meta", "like", "fn", "tags", "_op")

    @property
    def id(self):
        return self.qualname

    def __call__(self, *args, **kwargs):
        return self._op(*args, **kwargs)

    def __repr__(self):
        return f"<thunder_c.extend.Symbol {self.qualname}: {self.schema}>"


class ImplInfo:
    """What an executor runs for one op: the kernel and its checker."""

    __slots__ = ("symbol", "fn", "checker")

    def __init__(self, symbol, fn, checker):
        self.symbol, self.fn, self.checker = symbol, fn, checker


_ops = {}        # qualname -> (schema, tags) of every op registered from Python (not the Symbol: an
                 # executor lives only as long as something uses it)
_builtins = None  # qualname or id(op object) -> (qualname, schema)


def _builtin(key):
    global _builtins
    if _builtins is None:
        t = {}
        for q, _aliases, schema, _in_place in _C.ops():
            mod, _, name = q.partition(".")
            t[q] = (q, schema)
            o = getattr(_C.prims if mod == "prims" else _C.torch, name, None)
            if o is not None:
                t[id(o)] = (q, schema)
        _builtins = t
    return _builtins.get(key)


def _resolve(sym, who):
    """(qualname, schema, Symbol or None) of an op given as a Symbol, a thunder_c op
    (thunder_c.torch.gelu, thunder_c.prims.mul) or a qualified name ("ltorch.gelu")."""
    if isinstance(sym, Symbol):
        return sym.qualname, sym.schema, sym
    if isinstance(sym, str):
        if sym in _ops:
            return sym, _ops[sym][0], None
        r = _builtin(sym)
    elif isinstance(sym, _C.Op):
        r = _builtin(id(sym))
    else:
        raise TypeError(f"{who}: expected an op (thunder_c.torch.gelu, a Symbol) or its qualified name, "
                        f"got {type(sym).__name__}")
    if r is None:
        raise ValueError(f"{who}: unknown op {sym!r}")
    return r[0], r[1], None


def _split_params(text):
    parts, depth, cur, quote = [], 0, "", None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _params(schema):
    """(names of every parameter in order, how many of the last ones are keyword-only) of a schema."""
    head = schema.split("->")[0]
    names, nkw, kw = [], 0, False
    for p in _split_params(head[head.index("(") + 1:head.rindex(")")]):
        if p == "/":
            continue
        if p == "*":
            kw = True
            continue
        names.append(p.split("=")[0].split()[-1])
        nkw += kw
    return tuple(names), nkw


_TYPES = {_torch.Tensor: "Tensor", int: "int", float: "float", bool: "bool", str: "str", _torch.dtype: "ScalarType",
          _torch.device: "Device"}


def _schema_type(ann):
    if ann is inspect.Parameter.empty or ann is typing.Any:
        return "Any"
    if isinstance(ann, str):
        ann = {"Tensor": _torch.Tensor, "torch.Tensor": _torch.Tensor, "int": int, "float": float, "bool": bool,
               "str": str}.get(ann, ann)
    if ann in _TYPES:
        return _TYPES[ann]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union and len(args) == 2 and type(None) in args:
        inner = _schema_type(args[0] if args[1] is type(None) else args[1])
        return inner if inner == "Any" else inner + "?"
    if origin in (list, tuple, collections.abc.Sequence) and args:
        if args[0] is _torch.Tensor:
            return "Tensor[]"
        if args[0] is int:
            return "int[]"
    return "Any"


def _return_type(ann):
    if ann is inspect.Signature.empty or ann is _torch.Tensor or ann == "Tensor":
        return "Tensor"
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is tuple and args and all(a is _torch.Tensor for a in args):
        return "(" + ", ".join("Tensor" for _ in args) + ")"
    if origin in (list, collections.abc.Sequence) and args == (_torch.Tensor,):
        return "Tensor[]"
    raise ValueError(f"register_operator: cannot make a schema return type of {ann!r}; annotate the meta with "
                     "torch.Tensor, tuple[torch.Tensor, ...] or list[torch.Tensor], or pass schema=")


def _default(v):
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise ValueError(f"register_operator: cannot write the default {v!r} in a schema; pass schema=")


def _schema_from(name, f):
    """A PyTorch-style schema from a Python signature (annotations give types; else Any)."""
    sig = inspect.signature(f)
    parts, seen_kw, last_posonly = [], False, False
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"register_operator: *args / **kwargs ({p.name}) cannot be part of an op's schema; "
                             "pass schema=")
        if last_posonly and p.kind != p.POSITIONAL_ONLY:
            parts.append("/")
        last_posonly = p.kind == p.POSITIONAL_ONLY
        if p.kind == p.KEYWORD_ONLY and not seen_kw:
            parts.append("*")
            seen_kw = True
        text = f"{_schema_type(p.annotation)} {p.name}"
        if p.default is not p.empty:
            text += "=" + _default(p.default)
        parts.append(text)
    if last_posonly:
        parts.append("/")
    return f"{name}({', '.join(parts)}) -> {_return_type(sig.return_annotation)}"


_RULE_RESERVED = ("dtype", "device_type")


class OperatorExecutor:
    """An executor whose kernels are Python callables on torch tensors (Thunder's OperatorExecutor).

    The name is taken when the executor is made (ValueError if another executor has it; "fuser",
    "blas" and "eager" are the built-in ones) and freed with the object. List the executor (or its
    name, once registered) in thunder_c.jit(fn, executors=[ex, "blas", "eager"]): each top-level
    bound symbol goes to the first executor that implements it and whose checker accepts the call."""

    def __init__(self, name, *, version=None):
        self._handle = _C._ext_executor_new(name)
        self.name = name
        self.version = version
        self.opmap = {}    # name -> Symbol
        self.implmap = {}  # qualname -> ImplInfo

    def __repr__(self):
        v = f", version={self.version!r}" if self.version is not None else ""
        return f"thunder_c.extend.OperatorExecutor({self.name!r}{v})"

    def __eq__(self, other):
        return isinstance(other, OperatorExecutor) and other.name == self.name

    def __hash__(self):
        return hash(("thunder_c.extend.OperatorExecutor", self.name))

    def register_operator(self, name, *, like=None, meta=None, fn, schema=None, tags=(), autocast=None):
        """A new operator `<executor>.<name>`, implemented by this executor with `fn`.

        like: an op (thunder_c.torch.gelu, a Symbol) whose schema and meta the new op shares; or
        meta: a callable taking the arguments as TensorProxy objects and constants and returning a
        TensorProxy (or a tuple of them) for the outputs. The schema comes from `schema=` ("f(Tensor x,
        *, float alpha=1.0) -> Tensor"), else from meta's signature (annotations: torch.Tensor, int,
        float, bool, str, Optional[...], list[int], list[torch.Tensor]; no annotation: Any; the return
        annotation gives the outputs, default one tensor). fn: the kernel, called with torch tensors
        and Python values, returning torch tensors of the dtypes and shapes the meta says.
        tags: "random" (never merged or removed), "view" (an output may share an input's memory).
        autocast: "lower" / "fp32" / "promote" (PyTorch AMP's policies), or a rule (see
        register_autocast_rule)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"register_operator: the name must be a Python identifier, got {name!r}")
        if not callable(fn):
            raise TypeError(f"register_operator: fn (the kernel) must be callable, got {type(fn).__name__}")
        if (like is None) == (meta is None):
            raise ValueError("register_operator: give either like= or meta=")
        qualname = f"{self.name}.{name}"
        like_q = None
        if like is not None:
            if schema is not None:
                raise ValueError("register_operator: schema= goes with meta=; a like= op takes the other op's schema")
            like_q, like_schema, _ = _resolve(like, "register_operator")
            schema = name + like_schema[like_schema.index("("):]
        elif schema is None:
            try:
                inspect.signature(meta)
                src = meta
            except (TypeError, ValueError):  # a meta without a signature (a builtin): the kernel's
                src = fn
            schema = _schema_from(name, src)
        names, nkw = _params(schema)
        bits = 0
        for t in (tags,) if isinstance(tags, str) else tags:
            if t not in ("random", "view"):
                raise ValueError(f"register_operator: unknown tag {t!r} (expected 'random' or 'view')")
            bits |= _C._ext_tags[t]
        rule = None
        if isinstance(autocast, str):
            if autocast not in ("lower", "fp32", "promote"):
                raise ValueError(f"register_operator: unknown autocast policy {autocast!r} (expected 'lower', "
                                 "'fp32', 'promote' or a rule)")
            bits |= _C._ext_tags[autocast]
        elif autocast is not None:
            _check_rule(names, autocast, "register_operator")
            rule = autocast
        op = _C._ext_register_op(qualname, schema, meta, like_q, names, nkw, bits, rule)
        sym = Symbol()
        sym.name, sym.qualname, sym.executor, sym.schema = name, qualname, self, schema
        sym.meta, sym.like, sym.fn, sym.tags, sym._op = meta, like, fn, tuple(tags), op
        self._handle.add_impl(qualname, fn, None, names, nkw, "view" in sym.tags)
        self.opmap[name] = sym
        self.implmap[qualname] = ImplInfo(sym, fn, None)
        _ops[qualname] = (schema, sym.tags)
        return sym

    def register_implementation(self, sym, op=None, *, checker=None, fn=None):
        """This executor runs `sym` (an op: thunder_c.torch.gelu, thunder_c.prims.mul, a Symbol, or a
        qualified name) with `op`'s kernel (a Symbol registered with fn=) or with the callable `op` /
        `fn`. The kernel receives sym's arguments (torch tensors, Python values; keyword-only ones by
        keyword) and returns tensors of the recorded dtypes and shapes. checker(*args, **kwargs), called
        at compile time with TensorProxy objects, returns whether this executor takes the call (else
        the next executor in the list is asked)."""
        q, schema, own = _resolve(sym, "register_implementation")
        kernel = op.fn if isinstance(op, Symbol) else op if op is not None else fn
        if kernel is None:
            raise TypeError("register_implementation: give the kernel: an op registered with fn=, or a callable")
        names, nkw = _params(schema)
        is_view = "view" in (own.tags if own is not None else _ops.get(q, ("", ()))[1])
        self._handle.add_impl(q, kernel, checker, names, nkw, is_view)
        self.implmap[q] = ImplInfo(op if isinstance(op, Symbol) else own, kernel, checker)

    def register_autocast_rule(self, op, rule=None):
        """See thunder_c.extend.register_autocast_rule (usable as a decorator)."""
        return register_autocast_rule(op, rule)


def _check_rule(names, rule, who):
    if not callable(rule):
        raise TypeError(f"{who}: the autocast rule must be callable, got {type(rule).__name__}")
    clash = [n for n in names if n in _RULE_RESERVED]
    if clash:
        raise ValueError(f"{who}: an op with a parameter named {clash[0]!r} cannot have a Python autocast rule "
                         "(the rule receives dtype= and device_type=); use a policy")


def register_autocast_rule(op, rule=None):
    """The autocast rule of an op registered from Python (Thunder's register_autocast_rule): inside a
    torch.autocast region (or thunder_c.autocast), when the op is recorded, rule(*args, dtype=,
    device_type=, **kwargs) is called with the op's arguments (TensorProxy objects and constants), the
    region's dtype (torch.float16 / torch.bfloat16) and device type ("cpu" / "cuda"). It returns the
    dtype each tensor argument is converted to: a dict {parameter name: dtype}, or one entry per
    parameter (None: leave it). Only float16 / bfloat16 / float32 tensors on the region's device type
    are converted (float64, integer and bool never are, as in PyTorch AMP); the op is recorded on the
    converted tensors. With rule=None, returns a decorator."""
    if rule is None:
        def deco(r):
            register_autocast_rule(op, r)
            return r
        return deco
    q, schema, _ = _resolve(op, "register_autocast_rule")
    _check_rule(_params(schema)[0], rule, "register_autocast_rule")
    _C._ext_set_autocast_rule(q, rule)
    return rule


_executors = {}


def register_executor(ex):
    """Makes `ex` known by name (thunder_c.jit(fn, executors=["myex", ...])) and keeps it alive."""
    if not isinstance(ex, OperatorExecutor):
        raise TypeError(f"register_executor: expected an OperatorExecutor, got {type(ex).__name__}")
    _executors[ex.name] = ex
    return ex


def deregister_executor(ex):
    """Forgets a registered executor (by object or name): get_executor no longer finds it. The executor
    itself lives on while referenced or used by a compiled function, and its name stays taken until
    the object is freed. The built-in executors ("fuser", "blas", "eager") cannot be deregistered; an
    unknown name is a ValueError."""
    name = ex.name if isinstance(ex, OperatorExecutor) else ex
    if not isinstance(name, str):
        raise TypeError(f"deregister_executor: expected an OperatorExecutor or its name, got {type(ex).__name__}")
    if name in ("fuser", "blas", "eager"):
        raise ValueError(f"deregister_executor: {name!r} is a built-in executor and cannot be deregistered")
    if name not in _executors:
        raise ValueError(f"deregister_executor: no registered executor named {name!r}")
    del _executors[name]


def get_executor(name):
    """The registered executor named `name`, or None."""
    return _executors.get(name)


def get_all_executors():
    """The registered executors, in registration order."""
    return tuple(_executors.values())


_C._ext_init(TensorProxy)
