"""The eager executor's prim kernels against PyTorch itself (the installed torch): each case is a short prim-level trace run
through the `thunder` CLI with `--executors eager` (so no BLAS, no fusion), on inputs made here, and
compared with the same computation in PyTorch. The cases aim at the semantics a C kernel easily gets
wrong: integer wrap-around in narrow dtypes, truncating integer division and Python-style remainder,
exact integer pow, round half to even, NaN in maximum/sign/amax/argmax, every cast (NaN, infinities,
out-of-range values into narrow integers, float16/bfloat16 rounding), reductions over strided dims,
matmul/linear and the copying shape prims. Exact results are compared exactly; transcendental functions
and float sums within a few float32 ulps (PyTorch uses SLEEF and a cascade sum).

The unary prims are found by walking the op table (`thunder_c._C.op_rows()`: the rows of
src/ops/unary.def that have a prim, every kind; tests/python/op_rows.py) and compared with their PyTorch
function found through the row's aliases. Each gets the input and comparison mode of its kind
(UNARY_PRIM_DEFAULTS); UNARY_PRIMS holds the exceptions by name, and test_unary_prim_table_is_complete
checks that each of them names a prim. This walk is also the independent reference for a unary prim
that tests/unit/test_eager_kernels.c has no hand-written C reference for."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import op_rows
import safetensors_ref as st
import traceprog
from conftest import import_thunder_c

thunder_c = import_thunder_c()

CPU = 'devices.Device("cpu")'


def R(*shape, dtype=torch.float32, lo=-3.0, hi=3.0, seed=0, specials=False):
    g = torch.Generator().manual_seed(seed + 7 * sum(shape) + len(shape))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(lo), int(hi), shape, generator=g, dtype=torch.int64).to(dtype)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
    if specials:
        flat = x.view(-1)
        vals = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 0.5, 1.5, 2.5, -2.5]
        for i, v in enumerate(vals[: flat.numel()]):
            flat[(i * 5 + 3) % flat.numel()] = v
    return x.to(dtype)


def run_prog(cli, tmp_path, body, inputs):
    return traceprog.run(cli, tmp_path, body.split("; "), inputs, "--executors", "eager")


def compare(body, got, hdr, want, mode):
    assert list(got.shape) == list(want.shape), (body, got.shape, want.shape)
    if want.dtype == torch.bfloat16:
        assert b'"BF16"' in hdr, body
        got_t, want = torch.from_numpy(got.copy()), want.float()
    else:
        got_t = torch.from_numpy(got.copy())
        assert got_t.dtype == want.dtype, (body, got_t.dtype, want.dtype)
    if mode == "exact" or mode == "rounded":
        torch.testing.assert_close(got_t, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{body}: {m}")
    else:
        rtol, atol = {"ulp": (4e-7, 1e-7), "sum": (2e-6, 1e-6), "mm": (1e-5, 1e-5), "low": (1.6e-2, 1e-3),
                      "ulp64": (2.3e-16, 0.0)}[mode]
        torch.testing.assert_close(got_t, want, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{body}: {m}")


i8a, i8b = R(4, 9, dtype=torch.int8, lo=-128, hi=128, seed=1), R(4, 9, dtype=torch.int8, lo=-128, hi=128, seed=2)
u8a, u8b = R(4, 9, dtype=torch.uint8, lo=0, hi=256, seed=3), R(4, 9, dtype=torch.uint8, lo=0, hi=256, seed=4)
i32a = R(5, 6, dtype=torch.int32, lo=-1000, hi=1000, seed=5)
i32nz = torch.where(R(5, 6, dtype=torch.int32, lo=-9, hi=10, seed=6) == 0, torch.tensor(3, dtype=torch.int32),
                    R(5, 6, dtype=torch.int32, lo=-9, hi=10, seed=6))
i64a, i64e = R(5, 6, dtype=torch.int64, lo=-6, hi=7, seed=7), R(5, 6, dtype=torch.int64, lo=-2, hi=9, seed=8)
f32s, f32b = R(5, 6, specials=True, seed=9), R(5, 6, seed=10)
f64s = R(5, 6, dtype=torch.float64, specials=True, seed=11)
f32pos = R(5, 6, lo=0.05, hi=4.0, seed=12)
f16a, f16b = R(5, 6, dtype=torch.float16, specials=True, seed=13), R(5, 6, dtype=torch.float16, seed=14)
bf16a, bf16b = R(5, 6, dtype=torch.bfloat16, specials=True, seed=15), R(5, 6, dtype=torch.bfloat16, seed=16)
mask = R(5, 6, dtype=torch.bool, seed=17)
x3 = R(3, 4, 5, seed=18)
f32unit, f32big = R(5, 6, lo=-0.95, hi=0.95, seed=19), R(5, 6, lo=1.05, hi=6.0, seed=20)
casts = torch.tensor([0.0, -0.0, 1.5, -2.5, 300.7, -1.0, 40000.0, 1e10, -1e10, 65519.0, 65520.0, 1.00390625,
                      float("inf"), float("-inf"), float("nan"), 3.4e38, 1e-8, -7.999])

# The unary prims of the op table (rows of every kind with a prim) get an input and a comparison mode
# of compare() from their kind: transcendental float32 functions are SLEEF in PyTorch and glibc here, a
# few ulps ("ulp"); the others are exact. UNARY_PRIMS holds only the exceptions, name -> (input, mode):
# a prim not defined on its kind's input, one whose input must reach other values (half-integers,
# specials in float64), one exact although of kind FLOAT, or one IEEE 754 rounds correctly ("rounded":
# exact against the float64 result rounded once).
UNARY_PRIM_DEFAULTS = {"MATH": (f32s, "exact"), "FLOAT": (f32pos, "ulp"), "EXACT": (u8a, "exact"),
                       "PRED": (f64s, "exact")}
UNARY_PRIMS = {
    "acos": (f32unit, "ulp"), "acosh": (f32big, "ulp"), "asin": (f32unit, "ulp"), "atanh": (f32unit, "ulp"),
    "round": (f64s, "exact"), "sign": (f64s, "exact"), "sinc": (f32b, "ulp"), "sqrt": (f32pos, "rounded"),
    "trunc": (f64s, "exact"),
}
UNARY_PRIM_ROWS = [r for r in op_rows.unary_rows(thunder_c) if r["prim"]]
UNARY_PRIM_ENTRY = {r["name"]: op_rows.lookup(r, UNARY_PRIM_DEFAULTS, UNARY_PRIMS) for r in UNARY_PRIM_ROWS}

CASES = [
    # integer arithmetic: wrap-around, truncating division, Python remainder, C fmod, exact pow
    ("out = prims.add(a, b)", {"a": i8a, "b": i8b}, torch.add, "exact"),
    ("out = prims.mul(a, b)", {"a": i8a, "b": i8b}, torch.mul, "exact"),
    ("out = prims.sub(a, b)", {"a": u8a, "b": u8b}, torch.sub, "exact"),
    ("out = prims.mul(a, b)", {"a": u8a, "b": u8b}, torch.mul, "exact"),
    ("out = prims.add(a, 300)", {"a": i8a}, lambda a: a + 300, "exact"),
    ("out = prims.div(a, b)", {"a": i32a, "b": i32nz}, lambda a, b: torch.div(a, b, rounding_mode="trunc"), "exact"),
    ("out = prims.remainder(a, b)", {"a": i32a, "b": i32nz}, torch.remainder, "exact"),
    ("out = prims.fmod(a, b)", {"a": i32a, "b": i32nz}, torch.fmod, "exact"),
    ("out = prims.pow(a, b)", {"a": i64a, "b": i64e}, torch.pow, "exact"),
    ("out = prims.maximum(a, b)", {"a": i8a, "b": i8b}, torch.maximum, "exact"),
    ("out = prims.bitwise_xor(a, b)", {"a": u8a, "b": u8b}, torch.bitwise_xor, "exact"),
    ("out = prims.bitwise_not(a)", {"a": mask}, torch.bitwise_not, "exact"),
    ("out = prims.bitwise_not(a)", {"a": i8a}, torch.bitwise_not, "exact"),
    ("out = prims.neg(a)", {"a": i8a}, torch.neg, "exact"),
    ("out = prims.abs(a)", {"a": i8a}, torch.abs, "exact"),
    ("out = prims.sign(a)", {"a": i32a}, torch.sign, "exact"),
    ("out = prims.lt(a, 260)", {"a": i8a}, lambda a: a < 260, "exact"),
    # float arithmetic: exact in PyTorch too
    ("out = prims.add(a, b)", {"a": f32s, "b": f32b}, torch.add, "exact"),
    ("out = prims.div(a, b)", {"a": f32s, "b": f32b}, torch.div, "exact"),
    ("out = prims.mul(a, 0.1)", {"a": f32s}, lambda a: a * 0.1, "exact"),
    ("out = prims.remainder(a, b)", {"a": f32s, "b": f32b}, torch.remainder, "ulp"),
    ("out = prims.fmod(a, b)", {"a": f64s, "b": R(5, 6, dtype=torch.float64, seed=3)}, torch.fmod, "exact"),
    ("out = prims.maximum(a, b)", {"a": f32s, "b": f32b}, torch.maximum, "exact"),
    ("out = prims.minimum(a, b)", {"a": f16a, "b": f16b}, torch.minimum, "exact"),
    ("out = prims.maximum(a, b)", {"a": bf16a, "b": bf16b}, torch.maximum, "exact"),
    ("out = prims.round(a)", {"a": f32s}, torch.round, "exact"),
    ("out = prims.sign(a)", {"a": f32s}, torch.sign, "exact"),
    ("out = prims.floor(a)", {"a": f64s}, torch.floor, "exact"),
    ("out = prims.trunc(a)", {"a": f32s}, torch.trunc, "exact"),
    ("out = prims.sqrt(a)", {"a": f32s}, torch.sqrt, "rounded"),
    ("out = prims.isfinite(a)", {"a": f32s}, torch.isfinite, "exact"),
    ("out = prims.signbit(a)", {"a": f32s}, torch.signbit, "exact"),
    ("out = prims.eq(a, b)", {"a": f16a, "b": f16b}, torch.eq, "exact"),
    ("out = prims.ge(a, b)", {"a": bf16a, "b": bf16b}, torch.ge, "exact"),
    ("out = prims.where(c, a, b)", {"c": mask, "a": bf16a, "b": bf16b}, torch.where, "exact"),
    ("out = prims.where(c, a, 0.5)", {"c": mask, "a": f32s}, lambda c, a: torch.where(c, a, torch.tensor(0.5)), "exact"),
    # every unary prim of the table on its input (transcendental float32: SLEEF vs glibc, a few ulps)
    *[(f"out = prims.{r['name']}(a)", {"a": UNARY_PRIM_ENTRY[r["name"]][0]}, r["fn"],
       UNARY_PRIM_ENTRY[r["name"]][1]) for r in UNARY_PRIM_ROWS if UNARY_PRIM_ENTRY[r["name"]] and r["fn"]],
    # float64: glibc's exp is correctly rounded, PyTorch's vectorized (SLEEF) one within 1 ulp
    ("out = prims.exp(a)", {"a": f64s}, torch.exp, "ulp64"),
    ("out = prims.atan2(a, b)", {"a": f32s, "b": f32b}, torch.atan2, "ulp"),
    ("out = prims.pow(a, b)", {"a": f32pos, "b": f32b}, torch.pow, "ulp"),
    # reductions
    ("out = prims.sum(a, (0, 2))", {"a": x3}, lambda a: a.sum((0, 2)), "sum"),
    ("out = prims.sum(a, (0,))", {"a": x3}, lambda a: a.sum(0), "sum"),
    ("out = prims.sum(a, (1,))", {"a": i8a}, lambda a: a.sum(1, dtype=torch.int8), "exact"),
    ("out = prims.prod(a, (1,))", {"a": i64a}, lambda a: a.prod(1), "exact"),
    ("out = prims.amax(a, (1,))", {"a": f32s}, lambda a: a.amax(1), "exact"),
    ("out = prims.amin(a, (0,))", {"a": f64s}, lambda a: a.amin(0), "exact"),
    ("out = prims.argmax(a, 1)", {"a": f32s}, lambda a: a.argmax(1), "exact"),
    ("out = prims.argmin(a, None)", {"a": i32a}, lambda a: a.argmin(), "exact"),
    ("out = prims.var(a, (1,), correction=1)", {"a": x3}, lambda a: torch.var(a, (1,), correction=1), "sum"),
    ("(out, m) = prims.var_mean(a, (0, 2), correction=0)", {"a": x3},
     lambda a: torch.var_mean(a, (0, 2), correction=0)[0], "sum"),
    ("out = prims.sum(a, (0,))", {"a": bf16b}, lambda a: a.sum(0), "low"),
    # casts (PyTorch's CPU casts, including NaN/inf/out of range into integers)
    *[(f"out = prims.convert_element_type(a, dtypes.{torch_name})", {"a": casts},
       (lambda dt: lambda a: a.to(dt))(dt), "exact")
      for torch_name, dt in (("int8", torch.int8), ("uint8", torch.uint8), ("int16", torch.int16),
                             ("int32", torch.int32), ("int64", torch.int64), ("bool", torch.bool),
                             ("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float64", torch.float64))],
    ("out = prims.convert_element_type(a, dtypes.float32)", {"a": i64a}, lambda a: a.float(), "exact"),
    ("out = prims.convert_element_type(a, dtypes.float32)", {"a": f16a}, lambda a: a.float(), "exact"),
    ("out = prims.convert_element_type(a, dtypes.int8)", {"a": i32a}, lambda a: a.to(torch.int8), "exact"),
    # linear algebra (eager only: the reference GEMM)
    ("out = prims.matmul(a, b)", {"a": R(33, 70, seed=1), "b": R(70, 520, seed=2)}, torch.matmul, "mm"),
    ("out = prims.matmul(a, b)", {"a": R(2, 3, 4, dtype=torch.float64), "b": R(2, 4, 5, dtype=torch.float64, seed=1)},
     torch.matmul, "mm"),
    ("out = prims.matmul(a, b)", {"a": R(7), "b": R(3, 7, 2, seed=1)}, torch.matmul, "mm"),
    # bf16: PyTorch 1.13's CPU bf16 GEMM rounds partial sums to bf16 (errors of several ulps); the eager
    # kernel accumulates in float32 and rounds once, so it is held to the float64 result instead
    ("out = prims.matmul(a, b)", {"a": R(6, 5, dtype=torch.bfloat16), "b": R(5, 4, dtype=torch.bfloat16, seed=1)},
     lambda a, b: (a.double() @ b.double()).bfloat16(), "low"),
    ("out = prims.matmul(a, b)", {"a": R(3, 4, dtype=torch.int64, lo=-9, hi=9), "b": R(4, 2, dtype=torch.int64, lo=-9, hi=9)},
     torch.matmul, "exact"),
    ("out = prims.linear(a, w, b)", {"a": R(2, 3, 6), "w": R(4, 6, seed=1), "b": R(4, seed=2)}, F.linear, "mm"),
    ("out = prims.linear(a, w, None)", {"a": R(6), "w": R(4, 6, seed=1)}, F.linear, "mm"),
    # shape prims that copy
    ("out = prims.flip(a, (0, 2))", {"a": x3}, lambda a: torch.flip(a, (0, 2)), "exact"),
    ("out = prims.cat([a, b, a], 1)", {"a": f32s, "b": f32b}, lambda a, b: torch.cat([a, b, a], 1), "exact"),
    ("out = prims.take(a, i, 0)", {"a": x3, "i": torch.tensor([2, 0, 2, 1])},
     lambda a, i: torch.index_select(a, 0, i), "exact"),
    ("t0 = prims.transpose(a, (2, 0, 1)); out = prims.reshape(t0, (5, 12))", {"a": x3},
     lambda a: a.permute(2, 0, 1).reshape(5, 12), "exact"),
    ("t0 = prims.broadcast_in_dim(a, (3, 5, 6), (1, 2)); out = prims.clone(t0)", {"a": f32b},
     lambda a: a.expand(3, 5, 6).clone(), "exact"),
    ("t0 = prims.slice_prim(a, (0, 1, 0), (3, 4, 5), (2, 2, 3)); out = prims.clone(t0)", {"a": x3},
     lambda a: a[0:3:2, 1:4:2, 0:5:3].clone(), "exact"),
    # creation
    (f"out = prims.full((2, 3), 2.75, device={CPU}, dtype=dtypes.bfloat16)", {},
     lambda: torch.full((2, 3), 2.75, dtype=torch.bfloat16), "exact"),
    (f"out = prims.iota(6, start=-4, step=3, device={CPU}, dtype=dtypes.int32)", {},
     lambda: torch.arange(-4, -4 + 6 * 3, 3, dtype=torch.int32), "exact"),
]


@pytest.mark.parametrize("body,inputs,fn,mode", CASES, ids=[f"{i}-{c[0][6:46]}" for i, c in enumerate(CASES)])
def test_eager_prim_matches_torch(cli, tmp_path, body, inputs, fn, mode):
    with torch.no_grad():
        if mode == "rounded":
            # IEEE 754 requires a correctly rounded result; PyTorch's vectorized float32 kernel is not
            # on every CPU (AVX-512 builds differ by an ulp), so the reference is float64 rounded once.
            args = [x.double() if x.is_floating_point() else x for x in inputs.values()]
            want = fn(*args).to(next(iter(inputs.values())).dtype)
        else:
            want = fn(*inputs.values())
    got, hdr = run_prog(cli, tmp_path, body, inputs)
    compare(body, got, hdr, want, mode)


def test_unary_prim_table_is_complete():
    """Each unary prim of the op table has an input and a comparison (its kind's default in
    UNARY_PRIM_DEFAULTS, or its UNARY_PRIMS entry) and a PyTorch function among its aliases, and each
    UNARY_PRIMS entry is a unary prim (a typo would silently leave the prim on its default)."""
    no_default = [r["name"] for r in UNARY_PRIM_ROWS if UNARY_PRIM_ENTRY[r["name"]] is None]
    assert not no_default, f"unary prims of a kind without a default in UNARY_PRIM_DEFAULTS (add the kind, " \
                           f"or a UNARY_PRIMS entry): {no_default}"
    no_fn = [r["name"] for r in UNARY_PRIM_ROWS if r["fn"] is None]
    assert not no_fn, f"unary prims whose aliases name no PyTorch function: {no_fn}"
    stale = op_rows.stale_entries(UNARY_PRIMS, UNARY_PRIM_ROWS)
    assert not stale, f"UNARY_PRIMS entries that are no unary prim of the op table: {stale}"


def test_integer_division_by_zero_is_an_error(cli, tmp_path):
    """Integer division by zero fails with a clear message instead of crashing (PyTorch raises
    "ZeroDivisionError" too)."""
    a = torch.tensor([1, 2, 3], dtype=torch.int32)
    b = torch.tensor([1, 0, 3], dtype=torch.int32)
    st.write(tmp_path / "in.safetensors", {"a": a.numpy(), "b": b.numpy()})
    prog = tmp_path / "prog.py"
    prog.write_text('def computation(a, b):\n  # a: "cpu i32[3]"\n  # b: "cpu i32[3]"\n'
                    "  out = prims.div(a, b)\n  return out\n")
    p = cli("run", prog, "--executors", "eager", "--input", tmp_path / "in.safetensors", "--quiet")
    assert p.returncode == 1
    assert "ZeroDivisionError" in p.stderr and "prims.div" in p.stderr


@pytest.mark.parametrize("shape,dims", [((513, 3000), (0,)), ((7, 5, 4100), (0, 1)), ((3, 70), (0,)),
                                        ((2048, 2304), (0,))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float_sum_over_leading_dims(shape, dims, dtype):
    """Sums over the leading dims of a row-major tensor (bias gradients) run in wide groups of outputs
    with double accumulators, each output summed in row order: within one float32 ulp of the float64
    sum (exact-ish: only the final rounding), for widths that are and are not multiples of the group,
    with several threads."""
    from conftest import import_thunder_c
    thunder_c = import_thunder_c()
    x = R(*shape, dtype=torch.float64, seed=5).to(dtype)
    old = thunder_c.get_num_threads()
    try:
        for n in (1, 2, 3):
            thunder_c.set_num_threads(n)
            got = thunder_c.jit(lambda t: t.sum(dims), executors=["eager"])(x)
            want = x.double().sum(dims)
            assert got.dtype == dtype and got.shape == want.shape
            if dtype == torch.float32:
                ulp = torch.ldexp(torch.ones_like(want), torch.frexp(want).exponent - 24)
                assert ((got.double() - want).abs() <= ulp).all()
            else:  # summed in float32 (the float32 sum rounded once), then rounded to bf16
                assert torch.equal(got, want.float().to(torch.bfloat16)) or \
                    ((got.double() - want).abs() <= torch.ldexp(torch.ones_like(want), torch.frexp(want).exponent - 8)).all()
    finally:
        thunder_c.set_num_threads(old)
