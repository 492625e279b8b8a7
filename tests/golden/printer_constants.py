import thunder.core.devices as devices
import thunder.core.dtypes as dtypes
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def computation(x):
  # x: "cpu f32[2, 3]"
  t0 = mylib.constants(x, 1e-05, 1.1111111111111112, 448.0, -448.0, 0.0001, 1e+16, 123456789.0, float('NaN'), float('inf'), -float('inf'), 3, -7, True, False, None, 'none', "it's", dtypes.bfloat16, dtypes.float8_e4m3fn, devices.Device("cuda:0"), devices.Device("cpu"), slice(1,None,2), slice(None,None,None), ..., (1,), (), [2, 3], {'a': x, 'b': [x, 1]}, _torch_memory_format_0, approximate='tanh')  # t0: "cpu f32[2, 3]"
    # t0 = prims.neg(x)  # t0: "cpu f32[2, 3]"
  [t1, t2] = fusion0(x, t0)
    # t1 = prims.add(x, t0)  # t1: "cpu f32[2, 3]"
    # t2 = prims.mul(t1, t1)  # t2: "cpu f32[2, 3]"
  # a comment
  del t0
  return (t1, t2)
