"""Torch-level ops against PyTorch itself: each case is a one-op trace run through the `thunder` CLI on
inputs made here, compared with the same call in PyTorch eager (values within
torch.testing.assert_close's dtype tolerances, and the exact output dtype). Inputs and outputs travel as
.safetensors files written and read by the test's own reader (tests/python/safetensors_ref.py).

The unary elementwise ops are found by walking the op table (`thunder_c._C.op_rows()`, the rows of
src/ops/unary.def of every kind, composites too; tests/python/op_rows.py) and compared with their
PyTorch function found through the row's aliases. Each gets the input and tolerance of its kind
(UNARY_DEFAULTS); UNARY holds the exceptions by name, and test_unary_table_is_complete checks that each
of them names a row."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import op_rows
import traceprog
from conftest import import_thunder_c

thunder_c = import_thunder_c()


def R(*shape, dtype=torch.float32, lo=-2.0, hi=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape) * 31 + len(shape))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype in (torch.int64, torch.int32):
        return torch.randint(int(lo), int(hi), shape, generator=g, dtype=dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def run_case(cli, tmp_path, call, inputs, expected, tol=None):
    got, hdr = traceprog.run(cli, tmp_path, ["out = " + call], inputs)
    want = expected
    assert list(got.shape) == list(want.shape), (call, got.shape, want.shape)
    if want.dtype == torch.bfloat16:
        # our reader decodes bf16 to float32: compare the values, and the dtype through the header
        assert b'"BF16"' in hdr, call
        torch.testing.assert_close(torch.from_numpy(got.copy()), want.float(), rtol=1.6e-2, atol=1e-5)
    else:
        got_t = torch.from_numpy(got.copy())
        assert got_t.dtype == want.dtype, (call, got_t.dtype, want.dtype)
        torch.testing.assert_close(got_t, want, equal_nan=True, **(tol or {}))


a34, b34, b4 = R(3, 4), R(3, 4, seed=1), R(4, seed=2)
pos34 = R(3, 4, lo=0.1, hi=3.0, seed=3)
i34, bool34 = R(3, 4, dtype=torch.int64, lo=-5, hi=6, seed=4), R(3, 4, dtype=torch.bool, seed=5)
nz_i34 = torch.where(i34 == 0, torch.ones_like(i34), i34)
bf34, bfb34 = R(3, 4, dtype=torch.bfloat16, seed=6), R(3, 4, dtype=torch.bfloat16, seed=7)
d34 = R(3, 4, dtype=torch.float64, seed=8)
x234, m2 = R(2, 3, 4, seed=9), R(4, 5, seed=10)
unit34, big34 = R(3, 4, lo=-0.9, hi=0.9, seed=11), R(3, 4, lo=1.1, hi=4.0, seed=12)
u1 = lambda f: (lambda a: f(a))

# The unary rows of the op table (every kind, composites too) get their input from their kind, and a
# tolerance: DEFAULT is assert_close's for the output dtype (float32: rtol 1.3e-6, atol 1e-5; exact for
# bool and integers). UNARY holds only the exceptions, name -> (input, tolerance): a row whose function
# is not defined on its kind's input, or that needs another tolerance.
DEFAULT = {}
UNARY_DEFAULTS = {"MATH": (a34, DEFAULT), "FLOAT": (pos34, DEFAULT), "EXACT": (i34, DEFAULT),
                  "PRED": (a34, DEFAULT), op_rows.COMPOSITE: (a34, DEFAULT)}
UNARY = {
    "acos": (unit34, DEFAULT), "acosh": (big34, DEFAULT), "asin": (unit34, DEFAULT), "asinh": (a34, DEFAULT),
    "atan": (a34, DEFAULT), "atanh": (unit34, DEFAULT), "cosh": (a34, DEFAULT), "erfc": (a34, DEFAULT),
    "exp2": (a34, DEFAULT), "logical_not": (i34, DEFAULT), "sigmoid": (pos34, DEFAULT), "sinc": (a34, DEFAULT),
    "sinh": (a34, DEFAULT),
}
UNARY_ROWS = op_rows.unary_rows(thunder_c)
UNARY_ENTRY = {r["name"]: op_rows.lookup(r, UNARY_DEFAULTS, UNARY) for r in UNARY_ROWS}

CASES = [
    # elementwise binary with promotion and broadcasting
    ("ltorch.add(a, b, alpha=None)", {"a": a34, "b": b4}, lambda a, b: a + b),
    ("ltorch.add(a, b, alpha=2)", {"a": a34, "b": b34}, lambda a, b: torch.add(a, b, alpha=2)),
    ("ltorch.sub(a, 2.5, alpha=None)", {"a": i34}, lambda a: a - 2.5),
    ("ltorch.mul(a, b)", {"a": bf34, "b": bfb34}, lambda a, b: a * b),
    ("ltorch.mul(a, 2.0)", {"a": bf34}, lambda a: a * 2.0),
    ("ltorch.add(a, b, alpha=None)", {"a": bf34, "b": a34}, lambda a, b: a + b),
    ("ltorch.add(a, b, alpha=None)", {"a": a34, "b": d34}, lambda a, b: a + b),
    ("ltorch.add(a, 1, alpha=None)", {"a": i34}, lambda a: a + 1),
    ("ltorch.div(a, b, rounding_mode=None)", {"a": a34, "b": pos34}, lambda a, b: a / b),
    ("ltorch.div(a, b, rounding_mode=None)", {"a": i34, "b": nz_i34}, lambda a, b: a / b),
    ("ltorch.div(a, b, rounding_mode='floor')", {"a": i34, "b": nz_i34}, lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("ltorch.div(a, b, rounding_mode='trunc')", {"a": a34, "b": pos34}, lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("ltorch.remainder(a, b)", {"a": i34, "b": nz_i34}, lambda a, b: torch.remainder(a, b)),
    ("ltorch.pow(a, 2)", {"a": a34}, lambda a: a ** 2),
    ("ltorch.pow(a, b)", {"a": pos34, "b": b34}, lambda a, b: a ** b),
    ("ltorch.maximum(a, b)", {"a": a34, "b": b34}, torch.maximum),
    ("ltorch.minimum(a, b)", {"a": i34, "b": nz_i34}, torch.minimum),
    ("ltorch.lt(a, b)", {"a": a34, "b": b4}, lambda a, b: a < b),
    ("ltorch.eq(a, 0)", {"a": i34}, lambda a: a == 0),
    ("ltorch.logical_and(a, b)", {"a": bool34, "b": i34}, torch.logical_and),
    ("ltorch.where(c, a, b)", {"c": bool34, "a": a34, "b": b34}, torch.where),
    ("ltorch.where(c, a, 0.0)", {"c": bool34, "a": a34}, lambda c, a: torch.where(c, a, torch.tensor(0.0))),
    ("ltorch.clamp(a, -0.5, 0.5)", {"a": a34}, lambda a: torch.clamp(a, -0.5, 0.5)),
    ("ltorch.masked_fill(a, c, -1.0)", {"a": a34, "c": bool34}, lambda a, c: a.masked_fill(c, -1.0)),
    # unary: every row of the table, on its input
    *[(f"ltorch.{r['name']}(a)", {"a": UNARY_ENTRY[r['name']][0]}, r["fn"]) for r in UNARY_ROWS
      if UNARY_ENTRY[r["name"]] and r["fn"]],
    ("ltorch.exp(a)", {"a": bf34}, torch.exp),
    ("ltorch.abs(a)", {"a": i34}, torch.abs),
    ("ltorch.exp(a)", {"a": i34}, torch.exp),
    ("ltorch.neg(a)", {"a": i34}, torch.neg),
    # conversions
    ("ltorch.to(a, dtype=dtypes.bfloat16)", {"a": a34}, lambda a: a.to(torch.bfloat16)),
    ("ltorch.to(a, dtype=dtypes.int64)", {"a": a34}, lambda a: a.to(torch.int64)),
    ("ltorch.float(a)", {"a": bf34}, lambda a: a.float()),
    ("ltorch.type_as(a, b)", {"a": i34, "b": d34}, lambda a, b: a.type_as(b)),
    # reductions
    ("ltorch.sum(a, None, False, dtype=None)", {"a": x234}, torch.sum),
    ("ltorch.sum(a, 1, True, dtype=None)", {"a": x234}, lambda a: a.sum(1, keepdim=True)),
    ("ltorch.sum(a, (0, 2), False, dtype=None)", {"a": x234}, lambda a: a.sum((0, 2))),
    ("ltorch.sum(a, 1, False, dtype=None)", {"a": i34}, lambda a: a.sum(1)),
    ("ltorch.sum(a, 1, False, dtype=None)", {"a": bf34}, lambda a: a.sum(1)),
    ("ltorch.mean(a, -1, False, dtype=None)", {"a": x234}, lambda a: a.mean(-1)),
    ("ltorch.amax(a, 1, False)", {"a": x234}, lambda a: a.amax(1)),
    ("ltorch.amin(a, (0, 1), False)", {"a": x234}, lambda a: a.amin((0, 1))),
    ("ltorch.prod(a, 0, False, dtype=None)", {"a": a34}, lambda a: a.prod(0)),
    ("ltorch.var(a, 1, None, False, correction=None)", {"a": x234}, lambda a: a.var(1)),
    ("ltorch.var(a, 1, None, True, correction=0)", {"a": x234}, lambda a: torch.var(a, 1, unbiased=False, keepdim=True)),
    ("ltorch.std(a, None, None, False, correction=None)", {"a": a34}, lambda a: a.std()),
    ("ltorch.argmax(a, 1, False)", {"a": x234}, lambda a: a.argmax(1)),
    ("ltorch.argmin(a, None, False)", {"a": a34}, lambda a: a.argmin()),
    # shape
    ("ltorch.reshape(a, (4, -1))", {"a": x234}, lambda a: a.reshape(4, -1)),
    ("ltorch.permute(a, (2, 0, 1))", {"a": x234}, lambda a: a.permute(2, 0, 1)),
    ("ltorch.transpose(a, 0, 2)", {"a": x234}, lambda a: a.transpose(0, 2)),
    ("ltorch.unsqueeze(a, 1)", {"a": a34}, lambda a: a.unsqueeze(1)),
    ("ltorch.flatten(a, 1, -1)", {"a": x234}, lambda a: a.flatten(1)),
    ("ltorch.expand(a, (2, 3, 4))", {"a": b4}, lambda a: a.expand(2, 3, 4)),
    ("ltorch.cat([a, b], 0)", {"a": a34, "b": b34}, lambda a, b: torch.cat([a, b], 0)),
    ("ltorch.stack([a, b], 1)", {"a": a34, "b": b34}, lambda a, b: torch.stack([a, b], 1)),
    ("ltorch.getitem(a, (1, slice(None, None, 2)))", {"a": x234}, lambda a: a[1, ::2]),
    ("ltorch.getitem(a, (..., slice(1, 3, None)))", {"a": x234}, lambda a: a[..., 1:3]),
    ("ltorch.getitem(a, (None, -1))", {"a": a34}, lambda a: a[None, -1]),
    ("ltorch.tril(a, 0, fill_value=None)", {"a": a34}, torch.tril),
    ("ltorch.triu(a, 1, fill_value=None)", {"a": a34}, lambda a: torch.triu(a, 1)),
    ("ltorch.narrow(a, 1, 1, 2)", {"a": a34}, lambda a: a.narrow(1, 1, 2)),
    # linear algebra
    ("ltorch.matmul(a, b)", {"a": a34, "b": m2}, torch.matmul),
    ("ltorch.matmul(a, b)", {"a": x234, "b": m2}, torch.matmul),
    ("ltorch.matmul(a, b)", {"a": b4, "b": m2}, torch.matmul),
    ("ltorch.matmul(a, b)", {"a": a34, "b": b4}, torch.matmul),
    ("ltorch.matmul(a, b)", {"a": R(2, 1, 3, 4), "b": R(5, 4, 2, seed=3)}, torch.matmul),
    ("ltorch.matmul(a, b)", {"a": R(3, 4, dtype=torch.float64), "b": R(4, 2, dtype=torch.float64, seed=1)}, torch.matmul),
    ("ltorch.matmul(a, b)", {"a": bf34, "b": R(4, 5, dtype=torch.bfloat16, seed=2)}, torch.matmul),
    ("ltorch.linear(a, w, b)", {"a": x234, "w": m2.T.contiguous(), "b": R(5, seed=4)}, F.linear),
    ("ltorch.bmm(a, b)", {"a": R(2, 3, 4), "b": R(2, 4, 5, seed=1)}, torch.bmm),
    # nn
    ("ltorch.relu(a, False)", {"a": a34}, F.relu),
    ("ltorch.gelu(a, approximate='none')", {"a": a34}, F.gelu),
    ("ltorch.gelu(a, approximate='tanh')", {"a": a34}, lambda a: F.gelu(a, approximate="tanh")),
    ("ltorch.silu(a, False)", {"a": a34}, F.silu),
    ("ltorch.softmax(a, -1, dtype=None)", {"a": x234}, lambda a: torch.softmax(a, -1)),
    ("ltorch.softmax(a, 0, dtype=None)", {"a": bf34}, lambda a: torch.softmax(a, 0)),
    ("ltorch.log_softmax(a, 1, dtype=None)", {"a": x234}, lambda a: torch.log_softmax(a, 1)),
    ("ltorch.logsumexp(a, 1, False)", {"a": x234}, lambda a: torch.logsumexp(a, 1)),
    ("ltorch.layer_norm(a, (4,), w, b, 1e-05)", {"a": x234, "w": b4, "b": R(4, seed=11)},
     lambda a, w, b: F.layer_norm(a, (4,), w, b)),
    ("ltorch.layer_norm(a, (3, 4), None, None, 1e-05)", {"a": x234}, lambda a: F.layer_norm(a, (3, 4))),
    ("ltorch.rms_norm(a, (4,), w, 1e-06)", {"a": x234, "w": b4},
     lambda a, w: a * torch.rsqrt((a * a).mean(-1, keepdim=True) + 1e-6) * w),
    ("ltorch.embedding(i, w, None, None, 2.0, False, False)", {"i": R(2, 3, dtype=torch.int64, lo=0, hi=5), "w": R(5, 4)},
     F.embedding),
    ("ltorch.cross_entropy(a, t, None, None, -100, None, 'mean', 0.0)",
     {"a": R(6, 5), "t": torch.tensor([0, 4, 2, 1, 3, 2])}, F.cross_entropy),
    ("ltorch.cross_entropy(a, t, None, None, 1, None, 'sum', 0.0)",
     {"a": R(6, 5), "t": torch.tensor([0, 1, 2, 1, 3, 2])}, lambda a, t: F.cross_entropy(a, t, ignore_index=1, reduction="sum")),
    ("ltorch.dropout(a, 0.5, False, False)", {"a": a34}, lambda a: F.dropout(a, 0.5, training=False)),
    ("ltorch.scaled_dot_product_attention(q, k, v, None, 0.0, True, scale=None)",
     {"q": R(2, 5, 8), "k": R(2, 5, 8, seed=1), "v": R(2, 5, 8, seed=2)},
     lambda q, k, v: torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(
         ~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")), -1) @ v),
    ("ltorch.scaled_dot_product_attention(q, k, v, m, 0.0, False, scale=0.5)",
     {"q": R(2, 5, 8), "k": R(2, 4, 8, seed=1), "v": R(2, 4, 3, seed=2), "m": R(5, 4, dtype=torch.bool, seed=3)},
     lambda q, k, v, m: torch.softmax(torch.where(m, q @ k.transpose(-1, -2) * 0.5, torch.tensor(float("-inf"))), -1) @ v),
]


@pytest.mark.parametrize("call,inputs,fn", CASES, ids=[f"{i}-{c[0][:40]}" for i, c in enumerate(CASES)])
def test_op_matches_torch(cli, tmp_path, call, inputs, fn):
    with torch.no_grad():
        expected = fn(*inputs.values())
    op = call.split("(")[0].split(".")[-1]
    run_case(cli, tmp_path, call, inputs, expected, UNARY_ENTRY[op][1] if UNARY_ENTRY.get(op) else None)


def test_unary_table_is_complete():
    """Each unary row of the op table has an input and a tolerance (its kind's default in
    UNARY_DEFAULTS, or its UNARY entry) and a PyTorch function among its aliases, and each UNARY
    entry is a row (a typo would silently leave the row on its default)."""
    no_default = [r["name"] for r in UNARY_ROWS if UNARY_ENTRY[r["name"]] is None]
    assert not no_default, f"unary rows of a kind without a default in UNARY_DEFAULTS (add the kind, or " \
                           f"a UNARY entry): {no_default}"
    no_fn = [r["name"] for r in UNARY_ROWS if r["fn"] is None]
    assert not no_fn, f"unary rows whose aliases name no PyTorch function: {no_fn}"
    stale = op_rows.stale_entries(UNARY, UNARY_ROWS)
    assert not stale, f"UNARY entries that are no unary row of the op table: {stale}"
