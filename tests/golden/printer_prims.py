# Constructed by Dead Code Elimination (took 0 milliseconds)
import thunder
import thunder.core.dtypes as dtypes
import thunder.core.prims as prims
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def computation(a, b, w):
  # a: "cpu f32[2, 3]"
  # b: "cpu f32[2, 3]"
  # w: "cpu f32[4, 3]"
  t0 = prims.add(a, b)  # t0: "cpu f32[2, 3]"
  t1 = prims.convert_element_type(t0, dtypes.bfloat16)  # t1: "cpu bf16[2, 3]"
  t2 = prims.convert_element_type(w, dtypes.bfloat16)  # t2: "cpu bf16[4, 3]"
  t3 = prims.linear(t1, t2, None)  # t3: "cpu bf16[2, 4]"
  return (t3,)
