"""thunder_c.transforms: trace -> trace transforms of the C core, for Trace objects (and autocast for
functions). Each returns a new Trace with its provenance line; the input is left as it was."""
from . import _C
from ._C import autocast, cse, dce, del_last_used
from ._C import grad as _grad

__all__ = ["autocast", "dce", "cse", "del_last_used", "grad", "value_and_grad", "float8"]


def float8(fn_or_trace, filter=None, input_dtype=None, weight_dtype=None, **jit_options):
    """The float8 training transform (torchao's dynamic per-tensor scaling recipe).

    Every linear (ltorch.linear / prims.linear in float32, bfloat16 or float16, also after autocast)
    becomes fp8 math visible in the trace: amax = max(|x|) in float32, scale = 448 / clamp(amax,
    min=1e-12) (57344 for float8_e5m2), a saturated cast of x * scale to fp8, the same for the weight
    (transposed to [K, N]), then torch._scaled_mm(x_fp8 as 2-D, w_fp8_t, 1/scale_x, 1/scale_w, bias,
    out_dtype=the linear's dtype) reshaped back.

    fn_or_trace: a thunder_c.Trace gives a new Trace (provenance "Float8"); a function or nn.Module
    gives thunder_c.jit(fn, float8=..., **jit_options).
    filter: None (every linear) or a callable receiving one dict per linear, {"index", "op", "input",
    "weight", "bias", "input_shape", "weight_shape", "dtype", "weight_param", "module"}, returning
    whether to convert it ("module" is the parameter's module, "fc1", for jitted nn.Modules).
    input_dtype, weight_dtype: thunder_c.float8_e4m3fn (default) or thunder_c.float8_e5m2 (not both e5m2).
    """
    if isinstance(fn_or_trace, _C.Trace):
        if jit_options:
            raise TypeError("float8(trace, ...) takes no jit options: %s" % ", ".join(sorted(jit_options)))
        return _C.float8(fn_or_trace, filter=filter, input_dtype=input_dtype, weight_dtype=weight_dtype)
    from . import jit
    return jit(fn_or_trace, float8={"filter": filter, "input_dtype": input_dtype, "weight_dtype": weight_dtype},
               **jit_options)


def grad(trace, requires_grad=None):
    """Reverse-mode autodiff of a Trace (Thunder's grad transform and forward/backward split):
    returns (forward, backward), two Traces.

    forward takes trace's inputs and returns
        ({'output': <trace's return>, 'flat_args': [inputs], 'flat_output': (output tensors,)},
         ((saved tensors,), (saved numbers,)))
    backward is `backward_fn(saved_for_backward, cotangents)`: saved_for_backward is forward's second
    item, cotangents one tensor per flat_output entry (its dtype and shape); it returns one gradient per
    input of trace, None where not requested or not reached. Both run with thunder_c.jit(trace):
        out, saved = thunder_c.jit(forward)(*args)
        grads = thunder_c.jit(backward)(saved, cotangents)
    (a saved number, which only a number proxy of unknown value gives, goes back as a 0-dim tensor of
    its Python type: float64, int64 or bool; value_and_grad does that).
    requires_grad: None (every floating input) or one bool per input.
    """
    return _grad(trace, requires_grad)


def value_and_grad(trace, *args, cotangents=None, requires_grad=None, executors=None):
    """Runs grad(trace)'s forward and backward on args: (trace's output, gradients), one gradient per
    input (None where not requested or not reached). cotangents: one tensor per output tensor
    (default: ones, i.e. the gradient of the sum of every output)."""
    import torch

    from . import jit
    forward, backward = grad(trace, requires_grad)
    out, (saved_tensors, saved_numbers) = jit(forward, executors=executors)(*args)
    # saved numbers come back as Python numbers; the backward binds them as 0-dim tensors
    kinds = {bool: torch.bool, int: torch.int64, float: torch.float64}
    saved = (saved_tensors, tuple(n if isinstance(n, torch.Tensor) else torch.tensor(n, dtype=kinds[type(n)])
                                  for n in saved_numbers))
    if cotangents is None:
        cotangents = tuple(torch.ones_like(t) for t in out["flat_output"])
    grads = jit(backward, executors=executors)(saved, tuple(cotangents))
    return out["output"], grads
