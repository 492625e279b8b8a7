import thunder
import thunder.torch as ltorch
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def computation(a, b):
  # a: "cpu bf16[2, 2]"
  # b: "cpu f32[2, 2]"
  t1 = ltorch.add(a, b, alpha=None)  # t1: "cpu f32[2, 2]"
  t2 = ltorch.linear(t1, b, None)  # t2: "cpu f32[2, 2]"
  return t2
