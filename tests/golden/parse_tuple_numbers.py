import thunder
import thunder.core.prims as prims
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def computation(a, n, f):
  # a: "cuda:0 f32[4, 5]"
  # n: "int 4"
  # f: "float 0.5"
  (t0, t1) = prims.var_mean(a, (1,), correction=1)
  t2 = prims.mul(t0, f)  # t2: "cuda:0 f32[4]"
  return {'var': t2, 'mean': t1, 'n': n, 'pair': (t1, [t2])}
