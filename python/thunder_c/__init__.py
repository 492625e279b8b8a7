"""thunder_c — Lightning Thunder's design with a C core: a source-to-source compiler for PyTorch programs.

    import thunder_c
    jfn = thunder_c.jit(fn_or_module)
    y = jfn(x)
    print(thunder_c.last_traces(jfn)[-1])

Everything that decides what a program computes (tracing, ops, transforms, executors, the runtime) is
the C core, reached through the _C extension. This file holds only what has to be Python: the
TorchFunctionMode subclass that routes torch calls to the C tracer while a function is traced, and the
nn.Module wrapper returned by jit(module); _torchao.py recognises torchao's Float8Linear modules.
"""
import torch as _torch

# The torch releases this package supports: the tracer relies on TorchFunctionMode, torch 2.x's float8
# dtypes and torch._scaled_mm's signature, and reads torch's tensor object layout (csrc/pyth.h), so
# another release is refused here rather than half-working. CI tests 2.14.1.
TORCH_SUPPORTED = ((2, 4), (2, 15))  # [lowest, first unsupported)


def _check_torch_version(version):
    """Raises ImportError unless `version` (torch.__version__) lies in TORCH_SUPPORTED."""
    lo, hi = TORCH_SUPPORTED
    try:
        release = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
    except ValueError:
        release = None
    if release is None or not lo <= release < hi:
        raise ImportError(f"thunder_c supports torch >= {lo[0]}.{lo[1]} and < {hi[0]}.{hi[1]}, "
                          f"but torch {version} is installed (scripts/install-deps.sh makes .venv/ "
                          f"with torch 2.14.1)")


_check_torch_version(_torch.__version__)

from torch.overrides import TorchFunctionMode  # noqa: E402

from . import _C  # noqa: E402
from ._C import Trace, TensorProxy, autocast, cache_hits, cache_misses, trace_from_text
from ._C import get_num_threads, set_num_threads
from . import transforms
from . import extend  # user operators and executors (thunder_c.extend.OperatorExecutor)
from ._C import prims, torch  # the prims and torch-level (ltorch) ops, callable inside jitted code

__all__ = ["jit", "get_num_threads", "set_num_threads", "last_traces", "last_backward_traces", "cache_hits", "cache_misses", "compile_stats", "CompileStats", "RecompileWarning", "config", "trace_from_text", "autocast", "transforms",
           "extend", "Trace", "TensorProxy", "prims", "torch", "dtypes", "ThunderModule"]


# Activations with PyTorch's `inplace=` flag: with inplace=True each records its in-place op (the
# out-of-place op, then prims.copy_ into the input, as ltorch.relu_), which the tracer knows updates its
# first argument, as eager's F.relu calls torch.relu_. Values: the in-place torch callable and the
# parameters it takes after the input (all but `inplace`).
_INPLACE_ACTIVATIONS = {
    _torch.nn.functional.relu: (_torch.relu_, ("input", "inplace"), ()),
    _torch.nn.functional.silu: (_torch._C._nn.silu_, ("input", "inplace"), ()),
    _torch.nn.functional.dropout: (_torch.dropout_, ("input", "p", "training", "inplace"), (0.5, True)),
    # act
    _torch.nn.functional.hardswish: (_torch._C._nn.hardswish_, ("input", "inplace"), ()),
    _torch.nn.functional.hardsigmoid: (_torch._C._nn.hardsigmoid_, ("input", "inplace"), ()),
    _torch.nn.functional.hardtanh: (_torch._C._nn.hardtanh_, ("input", "min_val", "max_val", "inplace"), (-1.0, 1.0)),
    _torch.nn.functional.relu6: (_torch._C._nn.relu6_, ("input", "inplace"), ()),
    _torch.nn.functional.leaky_relu: (_torch._C._nn.leaky_relu_, ("input", "negative_slope", "inplace"), (0.01,)),
    _torch.nn.functional.elu: (_torch._C._nn.elu_, ("input", "alpha", "inplace"), (1.0,)),
    _torch.nn.functional.selu: (_torch.selu_, ("input", "inplace"), ()),
    _torch.nn.functional.celu: (_torch.celu_, ("input", "alpha", "inplace"), (1.0,)),
    _torch.nn.functional.mish: (_torch._C._nn.mish_, ("input", "inplace"), ()),
    _torch.nn.functional.threshold: (_torch.threshold_, ("input", "threshold", "value", "inplace"), (None, None)),
    _torch.nn.functional.rrelu: (_torch.rrelu_, ("input", "lower", "upper", "training", "inplace"),
                                 (1.0 / 8, 1.0 / 3, False)),
}


def _inplace_activation(func, args, kwargs):
    """(the in-place callable, its arguments) for an activation called with inplace=True, else None."""
    spec = _INPLACE_ACTIVATIONS.get(func)
    if spec is None:
        return None
    target, params, defaults = spec
    if len(args) > len(params) or any(k not in params for k in kwargs):
        return None  # not a valid call: the tracer reports it as it would
    bound = dict(zip(params, args))
    for k, v in kwargs.items():
        if k in bound:
            return None
        bound[k] = v
    if "input" not in bound or not bound.get("inplace", False):
        return None
    rest = [bound.get(p, d) for p, d in zip(params[1:-1], defaults)]
    return target, (bound["input"], *rest)


class _ThunderMode(TorchFunctionMode):
    """Active while thunder_c traces a function: every torch call goes to the C tracer. While it is,
    torch.compiler.is_compiling() is True (as under torch.compile, and as Thunder's lookaside makes it):
    libraries take their trace-friendly paths then (transformers builds its attention mask without
    reading mask values in Python)."""

    def __enter__(self):
        self._was_compiling = getattr(_torch.compiler, "_is_compiling_flag", None)
        if self._was_compiling is not None:
            _torch.compiler._is_compiling_flag = True
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self._was_compiling is not None:
                _torch.compiler._is_compiling_flag = self._was_compiling

    def __torch_function__(self, func, types, args=(), kwargs=None):
        ip = _inplace_activation(func, args, kwargs or {}) if func in _INPLACE_ACTIVATIONS else None
        if ip is not None:
            func, args, kwargs = ip[0], ip[1], None
        r = _C.torch_function(func, types, args, kwargs)
        if r is _C.PASSTHROUGH:  # a metadata read on a real tensor (x.shape of a captured tensor)
            return func(*args, **(kwargs or {}))
        return r


_C._set_mode_class(_ThunderMode)


class _ThunderFunction(_torch.autograd.Function):
    """Links a jitted call to PyTorch autograd (csrc/autograd.c decides everything): forward hands over
    the outputs the forward program computed and saves what the backward program reads; backward runs
    that program on the saved tensors and the incoming gradients."""

    @staticmethod
    def forward(ctx, call, *inputs):
        return _C._autograd_forward(ctx, call)

    @staticmethod
    def backward(ctx, *grads):
        return _C._autograd_backward(ctx, grads)


_C._set_autograd_function(_ThunderFunction)

from . import _torchao  # noqa: E402
from ._compile_stats import CompileStats, RecompileWarning, compile_stats, config  # noqa: E402

_C._set_recorder_class(_compile_stats._Recorder)

_C._set_module_hook(_torchao.prepare)


class ThunderModule(_torch.nn.Module):
    """What jit(module) returns: an nn.Module whose forward runs the compiled program. It holds the
    original module as `_model`, so parameters and buffers are shared with it (an optimizer's update
    of the original is seen at the next call)."""

    def __init__(self, model, jfn):
        super().__init__()
        self._model = model
        object.__setattr__(self, "_thunder_jit", jfn)

    def forward(self, *args, **kwargs):
        return self._thunder_jit(*args, **kwargs)

    def __getattr__(self, name):
        """Other attributes are the original module's (as torch.compile's OptimizedModule does), so
        `jmodel.last_loss` reads what forward stored on the model (llama2.c's train.py reads it so)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get("_modules", {}).get("_model")
            if model is None:
                raise
            return getattr(model, name)

    # The original module's keys (no "_model." prefix), so checkpoints move between the two.
    def state_dict(self, *args, **kwargs):
        return self._model.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        return self._model.load_state_dict(state_dict, strict=strict)


def jit(fn, executors=None, cache="constant values", float8=None, dump_fusions=None):
    """Compiles `fn` (a function, an nn.Module, or a thunder_c.Trace) with thunder-c.

    The result is called like fn. The first call with given input metadata (dtypes, shapes, strides,
    devices, requires_grad, aliasing between inputs, values of non-tensor arguments, autocast state)
    traces fn on proxies and compiles the trace; later calls with the same metadata reuse it.
    executors: in priority order, names ("fuser", "blas", "eager", a registered user executor's) or
    thunder_c.extend.OperatorExecutor objects (kept alive with the result); None = the default list.
    cache: "constant values" (default), "same input" or "no caching".
    float8: None/False, True, or a dict with any of filter, input_dtype, weight_dtype: applies the
    float8 training transform (thunder_c.transforms.float8) to each trace before DCE, so every linear
    runs as dynamic per-tensor scaled fp8 math (last_traces shows a "Float8" trace).
    dump_fusions: a directory; each compiled program's fusion kernels (the generated C, one file per
    program: <trace name>-<hash>.c) are written there (as $THUNDER_DUMP_FUSIONS does for every program).
    """
    j = _C.jit(fn, executors=executors, cache=cache, float8=float8, dump_fusions=dump_fusions)
    if isinstance(fn, _torch.nn.Module):
        return ThunderModule(fn, j)
    return j


def last_traces(jfn):
    """The traces of the last call's compilation, in pipeline order: the initial trace, then one per
    pass (Dead Code Elimination, Common Subexpression Elimination, Fuse Attention when the function
    writes attention out by hand (under autograd in place of the CSE trace), Delete Last Used — the execution trace); under autograd the grad transform's forward comes before the execution trace (the forward
    program's; see last_backward_traces). str(trace) prints it with subsymbols."""
    return _C.last_traces(jfn)


def last_backward_traces(jfn):
    """The backward traces of the last call's compilation when it ran under autograd (grad enabled and
    an input or parameter requiring grad): the grad transform's backward_fn, then its execution trace
    (Delete Last Used). [] when the call ran forward only; last_traces then ends with the forward."""
    return _C.last_backward_traces(jfn)


class _Dtypes:
    """thunder_c.dtypes.float32, ...: the dtypes of thunder-c (also thunder_c.float32)."""


dtypes = _Dtypes()
for _name in dir(_C):
    _obj = getattr(_C, _name)
    if isinstance(_obj, _C.dtype):
        globals()[_name] = _obj
        setattr(dtypes, _name, _obj)
del _name, _obj
