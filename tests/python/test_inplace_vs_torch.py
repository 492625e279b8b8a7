"""In-place torch-level ops (ltorch.add_, ltorch.exp_, ltorch.fill_, ltorch.copy_, ...) against PyTorch
eager: each case is a one-statement trace program run through the `thunder` CLI (traceprog.run) on inputs
made here, compared with the same in-place call in PyTorch applied to clones of the inputs. The
program's output is the new version of the modified tensor, so it must have that tensor's dtype and
shape and PyTorch's values: the out-of-place result cast to the tensor's dtype (bf16 += f32 computes in
f32 and rounds once), with only the other operands broadcast. Errors PyTorch raises (a float result
into an integer tensor, a broadcast that would grow the tensor) must make the CLI fail.

The unary in-place ops are found by walking the op table (`thunder_c._C.op_rows()`: the rows of
src/ops/unary.def with an in-place variant; tests/python/op_rows.py): each gets the input domain and
comparison of its kind (UNARY_INPLACE_DEFAULTS), UNARY_INPLACE holds the exceptions by name, and
test_unary_inplace_table_is_complete checks that each of them names such a row. Every other in-place op
of the table (`thunder_c._C.ops()`) must appear in some case of CASES (test_every_inplace_op_is_covered)."""
import pytest
import torch
import torch.nn.functional as F

import op_rows
import traceprog
from conftest import import_thunder_c

thunder_c = import_thunder_c()


def R(*shape, dtype=torch.float32, lo=-2.0, hi=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape) * 31 + len(shape) + 7)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        return torch.randint(int(lo), int(hi), shape, generator=g, dtype=dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


a34, b34, b4 = R(3, 4), R(3, 4, seed=1), R(4, seed=2)
pos34, pos34b = R(3, 4, lo=0.1, hi=3.0, seed=3), R(3, 4, lo=0.1, hi=3.0, seed=13)
unit34 = R(3, 4, lo=-0.9, hi=0.9, seed=4)  # acos, asin, atanh
big34 = R(3, 4, lo=1.1, hi=4.0, seed=5)  # acosh
i34, j34 = R(3, 4, dtype=torch.int64, lo=-9, hi=10, seed=6), R(3, 4, dtype=torch.int64, lo=-9, hi=10, seed=7)
nz_j34 = torch.where(j34 == 0, torch.full_like(j34, 3), j34)
i32_34 = R(3, 4, dtype=torch.int32, lo=-9, hi=10, seed=8)
bool34, bool4 = R(3, 4, dtype=torch.bool, seed=9), R(4, dtype=torch.bool, seed=10)
bf34, f16_34 = R(3, 4, dtype=torch.bfloat16, seed=11), R(3, 4, dtype=torch.float16, seed=12)
bfb34 = R(3, 4, dtype=torch.bfloat16, seed=14)
d34, s1 = R(3, 4, dtype=torch.float64, seed=15), R(1, dtype=torch.float64, seed=16)
b14 = R(1, 4, seed=17)
fi34, fj34 = i34.to(torch.float32), j34.to(torch.float32)
rows3, cols2, cols3 = torch.tensor([2, 0, 2]), torch.tensor([3, 0]), torch.tensor([1, 1, 3])
flat4 = torch.tensor([0, 5, 11, 5])
perm24 = torch.tensor([[2, 0, 1, 0], [0, 1, 2, 2]])  # distinct rows per column: one writer per element
rep24 = torch.tensor([[2, 0, 2, 1], [2, 2, 0, 1]])

# The unary rows of the op table with an in-place variant get an input and a comparison from their kind.
# EXACT: equal to PyTorch bit for bit; CLOSE: within assert_close's tolerances (libm vs. SLEEF in the
# last bits). UNARY_INPLACE holds only the exceptions, name -> (input, comparison): a row not defined on
# its kind's input, or compared otherwise than its kind.
EXACT, CLOSE = "exact", "close"
UNARY_INPLACE_DEFAULTS = {"MATH": (a34, EXACT), "FLOAT": (pos34, CLOSE), "EXACT": (i34, EXACT),
                          "PRED": (a34, EXACT), op_rows.COMPOSITE: (a34, CLOSE)}
UNARY_INPLACE = {
    "acos": (unit34, CLOSE), "acosh": (big34, CLOSE), "asin": (unit34, CLOSE), "atanh": (unit34, CLOSE),
    "frac": (a34, EXACT), "logical_not": (a34, EXACT), "sigmoid": (pos34, CLOSE), "sinc": (a34, CLOSE),
}
UNARY_INPLACE_ROWS = [r for r in op_rows.unary_rows(thunder_c) if r["inplace"]]
UNARY_INPLACE_ENTRY = {r["name"]: op_rows.lookup(r, UNARY_INPLACE_DEFAULTS, UNARY_INPLACE)
                       for r in UNARY_INPLACE_ROWS}


def _unary_inplace(row):
    meth = op_rows.tensor_method(row["ip_aliases"]) or row["name"] + "_"
    return lambda a: getattr(a, meth)()


CASES = [
    # the Python operators' ops, with broadcasting of the other operand (a row, a [1, 4], a 0-dim tensor)
    ("ltorch.add_(a, b)", {"a": a34, "b": b4}, lambda a, b: a.add_(b)),
    ("ltorch.add_(a, b, alpha=2)", {"a": a34, "b": b14}, lambda a, b: a.add_(b, alpha=2)),
    # (a 0-dim operand is made in the program: the test's .safetensors writer stores 0-dim arrays as [1])
    ("s = ltorch.reshape(b, ()); ltorch.add_(a, s)", {"a": a34, "b": s1}, lambda a, b: a.add_(b.reshape(()))),
    ("ltorch.add_(a, 3)", {"a": i34}, lambda a: a.add_(3)),
    ("ltorch.sub_(a, b, alpha=0.5)", {"a": a34, "b": b34}, lambda a, b: a.sub_(b, alpha=0.5)),
    ("ltorch.sub_(a, b)", {"a": i34, "b": j34}, lambda a, b: a.sub_(b)),
    ("ltorch.mul_(a, b)", {"a": a34, "b": b4}, lambda a, b: a.mul_(b)),
    ("ltorch.mul_(a, b)", {"a": i34, "b": bool34}, lambda a, b: a.mul_(b)),
    ("ltorch.div_(a, b)", {"a": a34, "b": pos34}, lambda a, b: a.div_(b)),
    ("ltorch.div_(a, b, rounding_mode='floor')", {"a": i34, "b": nz_j34},
     lambda a, b: a.div_(b, rounding_mode="floor")),
    ("ltorch.div_(a, b, rounding_mode='trunc')", {"a": a34, "b": pos34},
     lambda a, b: a.div_(b, rounding_mode="trunc")),
    ("ltorch.true_divide_(a, 4)", {"a": a34}, lambda a: a.true_divide_(4)),
    ("ltorch.floor_divide_(a, b)", {"a": a34, "b": pos34}, lambda a, b: a.floor_divide_(b)),
    ("ltorch.floor_divide_(a, b)", {"a": i34, "b": nz_j34}, lambda a, b: a.floor_divide_(b)),
    ("ltorch.remainder_(a, b)", {"a": i34, "b": nz_j34}, lambda a, b: a.remainder_(b)),
    ("ltorch.remainder_(a, 1.5)", {"a": a34}, lambda a: a.remainder_(1.5)),
    ("ltorch.fmod_(a, b)", {"a": i34, "b": nz_j34}, lambda a, b: a.fmod_(b)),
    ("ltorch.fmod_(a, 0.75)", {"a": a34}, lambda a: a.fmod_(0.75)),
    ("ltorch.pow_(a, b)", {"a": pos34, "b": b34}, lambda a, b: a.pow_(b)),
    ("ltorch.pow_(a, 2)", {"a": i34}, lambda a: a.pow_(2)),
    ("ltorch.atan2_(a, b)", {"a": a34, "b": b34}, lambda a, b: a.atan2_(b)),
    ("ltorch.bitwise_and_(a, b)", {"a": i34, "b": j34}, lambda a, b: a.bitwise_and_(b)),
    ("ltorch.bitwise_or_(a, b)", {"a": i34, "b": j34}, lambda a, b: a.bitwise_or_(b)),
    ("ltorch.bitwise_xor_(a, b)", {"a": bool34, "b": bool4}, lambda a, b: a.bitwise_xor_(b)),
    ("ltorch.logical_and_(a, b)", {"a": a34, "b": bool34}, lambda a, b: a.logical_and_(b)),
    ("ltorch.logical_or_(a, b)", {"a": i34, "b": a34}, lambda a, b: a.logical_or_(b)),
    ("ltorch.logical_xor_(a, b)", {"a": bool34, "b": i34}, lambda a, b: a.logical_xor_(b)),
    # comparisons store 0/1 in the tensor's own dtype
    ("ltorch.eq_(a, b)", {"a": i34, "b": j34}, lambda a, b: a.eq_(b)),
    ("ltorch.ne_(a, 0)", {"a": i34}, lambda a: a.ne_(0)),
    ("ltorch.lt_(a, b)", {"a": a34, "b": b4}, lambda a, b: a.lt_(b)),
    ("ltorch.le_(a, 0.5)", {"a": a34}, lambda a: a.le_(0.5)),
    ("ltorch.gt_(a, b)", {"a": bf34, "b": a34}, lambda a, b: a.gt_(b)),
    ("ltorch.ge_(a, b)", {"a": bool34, "b": bool4}, lambda a, b: a.ge_(b)),
    # clamp_, masked_fill_, lerp_
    ("ltorch.clamp_(a, -0.5, 0.75)", {"a": a34}, lambda a: a.clamp_(-0.5, 0.75)),
    ("ltorch.clamp_(a, min=b)", {"a": a34, "b": b4}, lambda a, b: a.clamp_(min=b)),
    ("ltorch.clamp_(a, max=2)", {"a": i34}, lambda a: a.clamp_(max=2)),
    ("ltorch.masked_fill_(a, m, -1.5)", {"a": a34, "m": bool4}, lambda a, m: a.masked_fill_(m, -1.5)),
    ("ltorch.masked_fill_(a, m, 2.7)", {"a": i34, "m": bool34}, lambda a, m: a.masked_fill_(m, 2.7)),
    ("ltorch.lerp_(a, b, 0.3)", {"a": a34, "b": b34}, lambda a, b: a.lerp_(b, 0.3)),
    ("ltorch.lerp_(a, b, w)", {"a": a34, "b": b4, "w": pos34 / 3}, lambda a, b, w: a.lerp_(b, w)),
    # fill_, zero_, copy_
    ("ltorch.fill_(a, 2.5)", {"a": a34}, lambda a: a.fill_(2.5)),
    ("ltorch.fill_(a, -1.5)", {"a": i34}, lambda a: a.fill_(-1.5)),
    ("s = ltorch.reshape(v, ()); ltorch.fill_(a, s)", {"a": bf34, "v": s1}, lambda a, v: a.fill_(v.reshape(()))),
    ("ltorch.zero_(a)", {"a": i32_34}, lambda a: a.zero_()),
    ("ltorch.copy_(a, b)", {"a": a34, "b": b4}, lambda a, b: a.copy_(b)),
    ("ltorch.copy_(a, b)", {"a": i34, "b": a34 * 3}, lambda a, b: a.copy_(b)),
    ("ltorch.copy_(a, b)", {"a": bf34, "b": d34}, lambda a, b: a.copy_(b)),
    ("ltorch.copy_(a, b)", {"a": a34, "b": bool4}, lambda a, b: a.copy_(b)),
    # dtype casting of the result: computed in the promoted dtype, stored in a's
    ("ltorch.add_(a, b)", {"a": bf34, "b": a34}, lambda a, b: a.add_(b)),
    ("ltorch.mul_(a, b)", {"a": bf34, "b": d34}, lambda a, b: a.mul_(b)),
    ("ltorch.add_(a, b)", {"a": bf34, "b": bfb34}, lambda a, b: a.add_(b)),
    ("ltorch.mul_(a, b)", {"a": f16_34, "b": bf34}, lambda a, b: a.mul_(b)),
    ("ltorch.add_(a, b)", {"a": i32_34, "b": i34}, lambda a, b: a.add_(b)),
    ("ltorch.sub_(a, b)", {"a": a34, "b": i34}, lambda a, b: a.sub_(b)),
    ("ltorch.add_(a, b)", {"a": a34, "b": d34}, lambda a, b: a.add_(b)),
    ("ltorch.exp_(a)", {"a": bf34}, lambda a: a.exp_()),
    ("ltorch.sigmoid_(a)", {"a": d34}, lambda a: a.sigmoid_()),
    # unary ops: every row of the table with an in-place variant, on its input domain
    *[(f"ltorch.{r['name']}_(a)", {"a": UNARY_INPLACE_ENTRY[r["name"]][0]}, _unary_inplace(r))
      for r in UNARY_INPLACE_ROWS if UNARY_INPLACE_ENTRY[r["name"]]],
    ("ltorch.relu_(a)", {"a": a34}, lambda a: a.relu_()),
    ("ltorch.abs_(a)", {"a": i34}, lambda a: a.abs_()),
    ("ltorch.neg_(a)", {"a": i34}, lambda a: a.neg_()),
    ("ltorch.bitwise_not_(a)", {"a": i34}, lambda a: a.bitwise_not_()),
    ("ltorch.logical_not_(a)", {"a": i34}, lambda a: a.logical_not_()),
    ("ltorch.relu_(a)", {"a": i34}, lambda a: a.relu_()),
    ("ltorch.floor_(a)", {"a": i34}, lambda a: a.floor_()),
    ("ltorch.sign_(a)", {"a": bf34}, lambda a: a.sign_()),
    # the names PyTorch programs use for these ops
    ("Tensor.__iadd__(a, b)", {"a": a34, "b": b4}, lambda a, b: a.__iadd__(b)),
    ("Tensor.__itruediv__(a, b)", {"a": a34, "b": pos34}, lambda a, b: a.__itruediv__(b)),
    ("Tensor.__imod__(a, b)", {"a": i34, "b": nz_j34}, lambda a, b: a.__imod__(b)),
    ("Tensor.__ixor__(a, b)", {"a": i34, "b": j34}, lambda a, b: a.__ixor__(b)),
    ("torch.nn.functional.relu_(a)", {"a": a34}, F.relu_),
    # F.silu / F.dropout with inplace=True record these (tests/python/test_inplace_activations.py)
    ("ltorch.silu_(a)", {"a": a34}, lambda a: F.silu(a, inplace=True)),
    ("ltorch.dropout_(a, 1.0)", {"a": a34}, lambda a: F.dropout(a, 1.0, True, True)),
    ("ltorch.dropout_(a, 0.5, False)", {"a": a34}, lambda a: F.dropout(a, 0.5, False, True)),
    ("torch.Tensor.zero_(a)", {"a": a34}, lambda a: a.zero_()),
    # the in-place samplers, with parameters that fix the sample (distributions: test_random_ops.py)
    ("ltorch.uniform_(a, 2.0, 2.0)", {"a": a34}, lambda a: a.uniform_(2.0, 2.0)),
    ("ltorch.normal_(a, 1.5, 0.0)", {"a": d34}, lambda a: a.normal_(1.5, 0.0)),
    ("ltorch.bernoulli_(a, 1.0)", {"a": i34}, lambda a: a.bernoulli_(1.0)),
    ("ltorch.bernoulli_(a, 0.0)", {"a": bf34}, lambda a: a.bernoulli_(0.0)),
    ("ltorch.exponential_(a, 1e30)", {"a": a34}, lambda a: a.exponential_(1e30)),
    ("ltorch.cauchy_(a, 1.0, 1e-30)", {"a": a34}, lambda a: a.cauchy_(1.0, 1e-30)),
    ("ltorch.log_normal_(a, 0.0, 1e-30)", {"a": a34}, lambda a: a.log_normal_(0.0, 1e-30)),
    ("ltorch.random_(a, 3, 4)", {"a": i34}, lambda a: a.random_(3, 4)),
    ("ltorch.random_(a, 1)", {"a": bf34}, lambda a: a.random_(1)),
    ("ltorch.geometric_(a, 0.9999999999999999)", {"a": i34}, lambda a: a.geometric_(0.9999999999999999)),
    # act: elementwise binary prims and composites, activations
    ("ltorch.hypot_(a, b)", {"a": a34, "b": b34}, lambda a, b: a.hypot_(b)),
    ("ltorch.bitwise_left_shift_(a, b)", {"a": i34, "b": nz_j34.abs()}, lambda a, b: a.bitwise_left_shift_(b)),
    ("ltorch.bitwise_right_shift_(a, 2)", {"a": i34}, lambda a: a.bitwise_right_shift_(2)),
    ("ltorch.gcd_(a, b)", {"a": i34, "b": j34}, lambda a, b: a.gcd_(b)),
    ("ltorch.lcm_(a, b)", {"a": i34, "b": j34}, lambda a, b: a.lcm_(b)),
    ("ltorch.copysign_(a, b)", {"a": a34, "b": b4}, lambda a, b: a.copysign_(b)),
    ("ltorch.heaviside_(a, b)", {"a": a34, "b": b34}, lambda a, b: a.heaviside_(b)),
    ("ltorch.ldexp_(a, b)", {"a": a34, "b": i34}, lambda a, b: a.ldexp_(b)),
    ("ltorch.xlogy_(a, b)", {"a": a34, "b": pos34}, lambda a, b: a.xlogy_(b)),
    ("ltorch.clamp_max_(a, 0.5)", {"a": a34}, lambda a: a.clamp_max_(0.5)),
    # (values whose products are exact: the call's "mul_" makes the comparison exact)
    ("ltorch.addcmul_(a, b, c, value=0.5)", {"a": i34 / 4, "b": j34 * 1.0, "c": i34[0] * 1.0},
     lambda a, b, c: a.addcmul_(b, c, value=0.5)),
    ("ltorch.addcdiv_(a, b, c)", {"a": a34, "b": b34, "c": pos34}, lambda a, b, c: a.addcdiv_(b, c)),
    ("ltorch.logit_(a, 0.1)", {"a": pos34 / 3.5}, lambda a: a.logit_(0.1)),
    ("ltorch.nan_to_num_(a, 1.0)", {"a": a34.log()}, lambda a: a.nan_to_num_(1.0)),
    ("ltorch.hardswish_(a)", {"a": a34 * 2}, lambda a: F.hardswish(a, inplace=True)),
    ("ltorch.hardsigmoid_(a)", {"a": a34 * 2}, lambda a: F.hardsigmoid(a, inplace=True)),
    ("ltorch.hardtanh_(a, -0.5, 1.5)", {"a": a34}, lambda a: F.hardtanh_(a, -0.5, 1.5)),
    ("ltorch.relu6_(a)", {"a": i34}, lambda a: F.relu6(a, inplace=True)),
    ("ltorch.leaky_relu_(a, 0.2)", {"a": a34}, lambda a: F.leaky_relu_(a, 0.2)),
    ("ltorch.elu_(a, 0.5)", {"a": a34}, lambda a: F.elu_(a, 0.5)),
    ("ltorch.selu_(a)", {"a": a34}, lambda a: torch.selu_(a)),
    ("ltorch.celu_(a, 2.0)", {"a": a34}, lambda a: torch.celu_(a, 2.0)),
    ("ltorch.mish_(a)", {"a": a34}, lambda a: F.mish(a, inplace=True)),
    ("ltorch.threshold_(a, 3, -1)", {"a": i34}, lambda a: torch.threshold_(a, 3, -1)),
    ("ltorch.rrelu_(a)", {"a": a34}, lambda a: torch.rrelu_(a)),
    ("ltorch.tensor_polygamma_(a, 2)", {"a": pos34}, lambda a: a.polygamma_(2)),
    ("ltorch.mvlgamma_(a, 2)", {"a": big34}, lambda a: a.mvlgamma_(2)),
    ("ltorch.nextafter_(a, b)", {"a": a34, "b": b34}, lambda a, b: a.nextafter_(b)),
    # index: writes through index tensors (repeated indices accumulate; integer-valued floats keep the
    # sums exact whatever the order)
    ("ltorch.index_add_(a, 0, i, s, alpha=2)", {"a": fi34, "i": rows3, "s": fj34},
     lambda a, i, s: a.index_add_(0, i, s, alpha=2)),
    ("ltorch.index_copy_(a, 1, i, s)", {"a": a34, "i": cols2, "s": b34[:, :2]},
     lambda a, i, s: a.index_copy_(1, i, s)),
    ("ltorch.index_fill_(a, 1, i, -2.5)", {"a": a34, "i": cols2}, lambda a, i: a.index_fill_(1, i, -2.5)),
    ("ltorch.index_put_(a, (i, j), v, True)", {"a": fi34, "i": rows3, "j": cols3, "v": fj34[0, :3]},
     lambda a, i, j, v: a.index_put_((i, j), v, accumulate=True)),
    ("ltorch.index_reduce_(a, 0, i, s, 'amax')", {"a": a34, "i": rows3, "s": b34},
     lambda a, i, s: a.index_reduce_(0, i, s, "amax")),
    ("ltorch.index_reduce_(a, 0, i, s, 'prod', include_self=False)", {"a": fi34, "i": rows3, "s": fj34},
     lambda a, i, s: a.index_reduce_(0, i, s, "prod", include_self=False)),
    ("ltorch.masked_scatter_(a, m, s)", {"a": a34, "m": bool34, "s": b34}, lambda a, m, s: a.masked_scatter_(m, s)),
    ("ltorch.put_(a, i, s, True)", {"a": fi34, "i": flat4, "s": fj34[1]}, lambda a, i, s: a.put_(i, s, True)),
    ("ltorch.scatter_(a, 0, i, s)", {"a": a34, "i": perm24, "s": b34}, lambda a, i, s: a.scatter_(0, i, s)),
    ("ltorch.scatter_(a, 1, i, value=1.5)", {"a": a34, "i": cols2.expand(3, 2).contiguous()},
     lambda a, i: a.scatter_(1, i, 1.5)),
    ("ltorch.scatter_add_(a, 0, i, s)", {"a": fi34, "i": rep24, "s": fj34}, lambda a, i, s: a.scatter_add_(0, i, s)),
    ("ltorch.scatter_reduce_(a, 0, i, s, 'amin', include_self=False)", {"a": a34, "i": rep24, "s": b34},
     lambda a, i, s: a.scatter_reduce_(0, i, s, "amin", include_self=False)),
    ("ltorch.setitem_(a, i, v)", {"a": a34, "i": rows3[:2], "v": b4}, lambda a, i, v: a.__setitem__(i, v) or a),
]

# Results PyTorch computes through float32 intermediates in its own kernel order for which the trace's
# prims differ in the last bit (transcendental functions of libm vs. SLEEF): compared with tolerance.
# The other ops' results are compared exactly: these (substrings of the call), and the unary rows whose
# comparison (UNARY_INPLACE_DEFAULTS or UNARY_INPLACE) says EXACT.
EXACT_OPS = ("add_", "sub_", "mul_", "fill_", "zero_", "copy_", "clamp_", "masked_fill_", "eq_", "ne_", "lt_",
             "le_", "gt_", "ge_", "floor_divide_", "relu_", "bitwise_", "logical_", "remainder_", "fmod_", "__i",
             "gcd_", "lcm_", "nextafter_", "copysign_", "heaviside_", "clamp_max_", "hardtanh_", "relu6_", "threshold_",
             "index_copy_", "index_fill_", "index_put_", "index_reduce_", "masked_scatter_", "put_", "scatter_",
             "setitem_")


def is_exact(call):
    op = call.split("; ")[-1].split("(")[0].split(".")[-1]
    if op.endswith("_") and UNARY_INPLACE_ENTRY.get(op[:-1]):
        return UNARY_INPLACE_ENTRY[op[:-1]][1] == EXACT
    return any(k in call for k in EXACT_OPS)


def statements(call):
    """"s = ...; op(...)" -> the program's statements, the last one assigned to `out`."""
    parts = call.split("; ")
    return parts[:-1] + ["out = " + parts[-1]]


def run_case(cli, tmp_path, call, inputs, fn):
    with torch.no_grad():
        clones = {k: v.clone() for k, v in inputs.items()}
        want = fn(*clones.values())
        first = next(iter(clones.values()))
        # PyTorch's in-place op returns the modified tensor itself, with its dtype and shape
        assert want.data_ptr() == first.data_ptr()
    got, hdr = traceprog.run(cli, tmp_path, statements(call), inputs)
    assert list(got.shape) == list(want.shape), (call, got.shape, want.shape)
    exact = is_exact(call)
    tol = {"rtol": 0, "atol": 0} if exact else {}
    if want.dtype == torch.bfloat16:
        # the reader decodes bf16 to float32 exactly: compare values, and the dtype through the header
        assert b'"BF16"' in hdr, call
        if not exact:
            tol = {"rtol": 1.6e-2, "atol": 1e-5}
        torch.testing.assert_close(torch.from_numpy(got.copy()), want.float(), equal_nan=True, **tol)
    else:
        got_t = torch.from_numpy(got.copy())
        assert got_t.dtype == want.dtype, (call, got_t.dtype, want.dtype)
        torch.testing.assert_close(got_t, want, equal_nan=True, **tol)


@pytest.mark.parametrize("call,inputs,fn", CASES, ids=[f"{i}-{c[0].split('; ')[-1][:48]}" for i, c in enumerate(CASES)])
def test_inplace_matches_torch(cli, tmp_path, call, inputs, fn):
    run_case(cli, tmp_path, call, inputs, fn)


def test_unary_inplace_table_is_complete():
    """Each unary row of the op table with an in-place variant has an input and a comparison (its kind's
    default in UNARY_INPLACE_DEFAULTS, or its UNARY_INPLACE entry), and each UNARY_INPLACE entry is such
    a row (a typo would silently leave the row on its default)."""
    no_default = [r["name"] for r in UNARY_INPLACE_ROWS if UNARY_INPLACE_ENTRY[r["name"]] is None]
    assert not no_default, f"unary in-place rows of a kind without a default in UNARY_INPLACE_DEFAULTS (add " \
                           f"the kind, or a UNARY_INPLACE entry): {no_default}"
    stale = op_rows.stale_entries(UNARY_INPLACE, UNARY_INPLACE_ROWS)
    assert not stale, f"UNARY_INPLACE entries that are no unary row with an in-place variant: {stale}"


def test_every_inplace_op_is_covered():
    """Each in-place op of the table appears in at least one case above. The unary rows' in-place ops
    are cases of the walk, one each (test_unary_inplace_table_is_complete names a row the walk cannot
    give an input, so it is not reported here twice); any other in-place op (a TH_BINARY row's, a
    TH_TORCH_INPLACE row's) needs a case in CASES."""
    called = {c[0].split("; ")[-1].split("(")[0].split(".")[-1] for c in CASES}
    ops = [q.split(".", 1)[1] for q, _aliases, _schema, in_place in thunder_c._C.ops() if in_place]
    assert len(ops) >= 60, ops
    unary = {r["inplace"].split(".", 1)[1] for r in UNARY_INPLACE_ROWS}
    missing = [o for o in ops if o not in called and o not in unary]
    assert not missing, f"in-place ops of the op table without a case (add one to CASES): {missing}"


# PyTorch's RuntimeErrors for in-place ops, and what the CLI says for the same program.
ERRORS = [
    ("ltorch.add_(a, b)", {"a": R(1), "b": R(2)}, lambda a, b: a.add_(b),
     "output with shape [1] doesn't match the broadcast shape [2]"),
    ("ltorch.mul_(a, b)", {"a": b4, "b": a34}, lambda a, b: a.mul_(b),
     "output with shape [4] doesn't match the broadcast shape [3, 4]"),
    ("ltorch.add_(a, 1.5)", {"a": i34}, lambda a: a.add_(1.5),
     "result type Float can't be cast to the desired output type Long"),
    ("ltorch.div_(a, b)", {"a": i34, "b": nz_j34}, lambda a, b: a.div_(b),
     "result type Float can't be cast to the desired output type Long"),
    ("ltorch.sqrt_(a)", {"a": i32_34}, lambda a: a.sqrt_(),
     "result type Float can't be cast to the desired output type Int"),
    ("ltorch.add_(a, b)", {"a": bool34, "b": i34}, lambda a, b: a.add_(b),
     "result type Long can't be cast to the desired output type Bool"),
    ("ltorch.copy_(a, b)", {"a": b4, "b": R(3)}, lambda a, b: a.copy_(b),
     "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 0"),
    ("ltorch.fill_(a, v)", {"a": a34, "v": b4}, lambda a, v: a.fill_(v),
     "fill_ only supports 0-dimension value tensor but got tensor with 1 dimensions."),
]


@pytest.mark.parametrize("call,inputs,fn,msg", ERRORS, ids=[f"{i}-{e[0][:40]}" for i, e in enumerate(ERRORS)])
def test_inplace_errors_match_torch(cli, tmp_path, call, inputs, fn, msg):
    with pytest.raises(RuntimeError) as e:
        fn(*[v.clone() for v in inputs.values()])
    assert msg in str(e.value)
    with pytest.raises(AssertionError) as e:
        traceprog.run(cli, tmp_path, ["out = " + call], inputs)
    assert msg in str(e.value), str(e.value)
