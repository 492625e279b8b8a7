"""A user executor written in Python (thunder_c.extend, Lightning Thunder's thunder.extend): a new fused
operator with a torch kernel, a Python kernel taking over a built-in op for the calls its checker
accepts, and an autocast rule, used by an ordinary PyTorch function compiled with thunder_c.jit.

    PYTHONPATH=build/python .venv/bin/python examples/python/user_executor.py

Prints the execution trace (which names the executors' ops) and who ran each step, checks the results
against PyTorch eager (float32, and bfloat16 under torch.autocast) and exits non-zero on a mismatch.
"""
import sys

import torch
import torch.nn.functional as F

import thunder_c
from thunder_c.extend import OperatorExecutor, TensorProxy, register_executor

ex = register_executor(OperatorExecutor("pyex", version="0.1"))
calls = {"bias_gelu": 0, "softmax": 0}


# 1. A new operator: pyex.bias_gelu(x, b) = gelu(x + b), its shape rule (meta) and its kernel.
def bias_gelu_meta(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if b.shape != x.shape[-1:]:
        raise ValueError(f"bias_gelu: expected b of shape {tuple(x.shape[-1:])}, got {tuple(b.shape)}")
    return TensorProxy(like=x)


def bias_gelu_kernel(x, b):
    calls["bias_gelu"] += 1
    return F.gelu(x + b)  # torch tensors in (views of the program's buffers), a torch tensor out


bias_gelu = ex.register_operator("bias_gelu", meta=bias_gelu_meta, fn=bias_gelu_kernel)


# Inside torch.autocast, both tensors run in the region's dtype (as PyTorch AMP does for linear).
@ex.register_autocast_rule(bias_gelu)
def bias_gelu_autocast(x, b, *, dtype, device_type):
    return {"x": dtype, "b": dtype}


# 2. A built-in op taken over: softmax over the last dim of a float32 tensor runs torch's kernel;
#    anything else (another dim, another dtype) is left to the next executor.
def softmax_kernel(a, dim, dtype=None):
    calls["softmax"] += 1
    return torch.softmax(a, dim, dtype=dtype)


def softmax_checker(a, dim, dtype=None):
    return a.dtype == torch.float32 and dim in (-1, a.ndim - 1) and dtype is None


ex.register_implementation(thunder_c.torch.softmax, fn=softmax_kernel, checker=softmax_checker)


def mlp(x, w1, b1, w2):
    return torch.softmax(bias_gelu(x @ w1.t(), b1) @ w2.t(), dim=-1)


def reference(x, w1, b1, w2):  # the same in plain PyTorch (bias_gelu is callable inside jitted code only)
    return torch.softmax(F.gelu(x @ w1.t() + b1) @ w2.t(), dim=-1)


def main():
    torch.manual_seed(0)
    x, w1, b1, w2 = torch.randn(8, 32), torch.randn(64, 32) / 6, torch.randn(64) / 10, torch.randn(16, 64) / 8
    jfn = thunder_c.jit(mlp, executors=[ex, "blas", "eager"])
    ok = True

    y = jfn(x, w1, b1, w2)
    want = reference(x, w1, b1, w2)
    err = (y - want).abs().max().item()
    ok &= y.dtype == want.dtype and err < 1e-5
    trace = thunder_c.last_traces(jfn)[-1]
    print(trace)
    for b in trace.bound_symbols:
        if b.executor:
            print(f"  {', '.join(b.output_names):8} = {b.qualname:20} run by {b.executor}")
    print(f"float32: max |thunder_c - eager| = {err:.2e}")

    with torch.autocast("cpu", dtype=torch.bfloat16):
        yb = jfn(x, w1, b1, w2)
        wantb = reference(x, w1, b1, w2)
    errb = (yb.float() - wantb.float()).abs().max().item()
    ok &= yb.dtype == wantb.dtype and errb < 2e-2
    print(f"autocast bf16: output {yb.dtype} (eager {wantb.dtype}), max |difference| = {errb:.2e}")

    jfn(x, w1, b1, w2)  # a cache hit runs the Python kernels too
    print(f"Python kernel calls: {calls}; cache hits {thunder_c.cache_hits(jfn)}, misses {thunder_c.cache_misses(jfn)}")
    ok &= calls == {"bias_gelu": 3, "softmax": 2} and thunder_c.cache_hits(jfn) == 1
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
