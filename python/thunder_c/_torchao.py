"""torchao's float8 training (torchao.float8.convert_to_float8_training) under thunder_c.jit.

torchao's Float8Linear.forward quantizes its input and weight into Float8TrainingTensor subclass
instances inside an autograd.Function and lets the subclass's __torch_dispatch__ turn torch.mm into
torch._scaled_mm. thunder_c does not trace tensor subclasses; it records what that computes instead.
Before a jitted module is traced, prepare() gives every Float8Linear among its submodules a forward
for the duration of the trace that records the linear plainly, inside a float8 region carrying the
module config's formats (csrc/transforms.c): the jit then converts exactly that linear with the core's
float8 transform, which is torchao's dynamic tensor-wise recipe op for op (amax -> scale = max / clamp(
amax, 1e-12) -> saturated cast -> _scaled_mm with the inverse scales) and whose backward is torchao's
(the cotangent in float8_e5m2, grad_input and grad_weight as _scaled_mm). Configurations that recipe
does not cover raise NotImplementedError naming the module and the setting.
"""
import sys
import types

import torch

from . import _C


def _float8_linear_class():
    """torchao's Float8Linear when torchao.float8 is imported (a model converted by it has imported it)."""
    mod = sys.modules.get("torchao.float8.float8_linear")
    return getattr(mod, "Float8Linear", None) if mod is not None else None


def _formats(module, name):
    """(input_dtype, weight_dtype) of Float8Linear `module` (named `name` in errors), or NotImplementedError
    for a configuration the float8 transform does not compute as torchao does."""
    from torchao.float8.config import ScalingGranularity, ScalingType

    c = module.config

    def refuse(what):
        raise NotImplementedError(f"thunder_c: torchao Float8Linear {name}: {what} is not supported (thunder_c "
                                  f"runs dynamic tensor-wise scaling: float8_e4m3fn/float8_e5m2 input and weight, "
                                  f"float8_e5m2 gradients)")

    casts = {"cast_config_input": c.cast_config_input, "cast_config_weight": c.cast_config_weight,
             "cast_config_grad_output": c.cast_config_grad_output}
    for field, cc in casts.items():
        if cc.scaling_type is not ScalingType.DYNAMIC:
            refuse(f"{field}.scaling_type={cc.scaling_type.name}")
        if cc.scaling_granularity is not ScalingGranularity.TENSORWISE:
            refuse(f"{field}.scaling_granularity={cc.scaling_granularity.name}")
    for field, main in (("cast_config_input_for_grad_weight", "cast_config_input"),
                        ("cast_config_weight_for_grad_input", "cast_config_weight"),
                        ("cast_config_grad_output_for_grad_weight", "cast_config_grad_output")):
        if getattr(c, field) != casts[main]:
            refuse(f"{field} different from {main}")
    if c.round_scales_to_power_of_2:
        refuse("round_scales_to_power_of_2=True")
    if c.enable_fsdp_float8_all_gather:
        refuse("enable_fsdp_float8_all_gather=True")
    fmts = (torch.float8_e4m3fn, torch.float8_e5m2)
    x, w, g = c.cast_config_input.target_dtype, c.cast_config_weight.target_dtype, c.cast_config_grad_output.target_dtype
    for field, dt in (("cast_config_input.target_dtype", x), ("cast_config_weight.target_dtype", w)):
        if dt not in fmts:
            refuse(f"{field}={dt}")
    if x == w == torch.float8_e5m2:
        refuse("float8_e5m2 input and weight")
    if g != torch.float8_e5m2:
        refuse(f"cast_config_grad_output.target_dtype={g}")
    return x, w


def _float8_linear_forward(self, input, *, _name, _formats):
    """Float8Linear.forward as thunder_c records it: the same autocast handling, the linear in its
    inputs' dtype inside a float8 region, the bias added after it in the output's dtype."""
    if torch.is_autocast_enabled():  # Float8Linear's own rule: the GPU autocast dtype
        input = input.to(torch.get_autocast_gpu_dtype())
    cpu_autocast = torch.is_autocast_enabled("cpu")
    start = _C._float8_region_begin()
    # torchao's GEMM is _scaled_mm of the quantized operands, which autocast does not convert
    with torch.autocast("cpu", enabled=False):
        output = torch.nn.functional.linear(input, self.weight)
    _C._float8_region_end(start, _formats[0], _formats[1], f"torchao Float8Linear {_name}")
    if cpu_autocast and output.dtype == torch.float32:
        # under CPU autocast torch.mm of the Float8TrainingTensors (presenting float32) is autocast to the
        # autocast dtype: torchao relabels them and _scaled_mm writes that dtype
        output = output.to(torch.get_autocast_dtype("cpu"))
    if self.bias is not None:
        output = output + self.bias.to(output.dtype)
    return output


def prepare(submodules):
    """Called by thunder_c's tracer with the submodules of a module about to be traced: gives each torchao
    Float8Linear the recording forward above. Returns a callable that restores them, or None."""
    cls = _float8_linear_class()
    if cls is None:
        return None
    mods = [m for m in submodules if isinstance(m, cls)]
    if not mods:
        return None
    names = {id(m): n for n, m in submodules[0].named_modules()}  # submodules[0] is the jitted module
    saved = []
    try:
        for m in mods:
            name = repr(names[id(m)]) if names.get(id(m)) else "(the jitted module)"
            fmts = _formats(m, name)
            saved.append((m, m.__dict__.get("forward", _MISSING)))
            m.__dict__["forward"] = types.MethodType(
                lambda self, input, _n=name, _f=fmts: _float8_linear_forward(self, input, _name=_n, _formats=_f), m)
    except BaseException:
        _restore(saved)
        raise
    return lambda: _restore(saved)


_MISSING = object()


def _restore(saved):
    for m, old in saved:
        if old is _MISSING:
            m.__dict__.pop("forward", None)
        else:
            m.__dict__["forward"] = old
