"""`thunder run PROGRAM --autocast bf16` against PyTorch's own CPU autocast.

Every op of PyTorch's CPU autocast test lists (torch.testing._internal.autocast_test_lists.
AutocastCPUTestLists of the installed torch: torch_16, torch_fp32, nn_16, nn_fp32,
torch_need_autocast_promote, and the builtin-promotion lists of functions and Tensor methods) that
thunder-c has is written as a one-op trace, run through the CLI with
--autocast bf16 on the lists' own arguments, and compared with the same call under
`with torch.autocast("cpu", torch.bfloat16)` in eager PyTorch: the same output dtype, and values within
AMP tolerance (1e-2 relative to the output's scale). Then Thunder's autocast scenarios (seed 000:
prims.linear in a region; seed 001: (a @ b) + c; f and g of test_thunder_autocast_transform; 3-D @ 2-D
matmul) and the ops PyTorch's CUDA autocast runs in float32 but its CPU autocast does not."""
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import traceprog


def _autocast_cpu_test_lists():
    """torch.testing._internal.autocast_test_lists.AutocastCPUTestLists of the installed torch."""
    from torch.testing._internal.autocast_test_lists import AutocastCPUTestLists
    return AutocastCPUTestLists


torch.manual_seed(0)
LISTS = _autocast_cpu_test_lists()("cpu")

# op name in the lists -> (thunder-c call with inputs a0, a1, ..., eager callable)
TORCH_OPS = {
    "bmm": ("ltorch.bmm(a0, a1)", torch.bmm),
    "mm": ("ltorch.mm(a0, a1)", torch.mm),
    "matmul": ("ltorch.matmul(a0, a1)", torch.matmul),
    "baddbmm": ("ltorch.baddbmm(a0, a1, a2)", torch.baddbmm),
    "addmm": ("ltorch.addmm(a0, a1, a2)", torch.addmm),
    "linear": ("ltorch.linear(a0, a1)", F.linear),
    "conv1d": ("ltorch.conv1d(a0, a1)", torch.conv1d),
    "conv2d": ("ltorch.conv2d(a0, a1)", torch.conv2d),
    "conv3d": ("ltorch.conv3d(a0, a1)", torch.conv3d),
    "conv_transpose1d": ("ltorch.conv_transpose1d(a0, a1)", torch.conv_transpose1d),
    "conv_transpose2d": ("ltorch.conv_transpose2d(a0, a1)", torch.conv_transpose2d),
    "conv_transpose3d": ("ltorch.conv_transpose3d(a0, a1)", torch.conv_transpose3d),
    "nll_loss": ("ltorch.nll_loss(a0, a1)", F.nll_loss),
    "mse_loss": ("ltorch.mse_loss(a0, a1)", F.mse_loss),
    "cat": ("ltorch.cat([a0, a1], 0)", torch.cat),
    "stack": ("ltorch.stack([a0, a1], 0)", torch.stack),
    "eq": ("ltorch.eq(a0, a1)", torch.eq),
    "ge": ("ltorch.ge(a0, a1)", torch.ge),
    "gt": ("ltorch.gt(a0, a1)", torch.gt),
    "le": ("ltorch.le(a0, a1)", torch.le),
    "lt": ("ltorch.lt(a0, a1)", torch.lt),
    "ne": ("ltorch.ne(a0, a1)", torch.ne),
    "add": ("ltorch.add(a0, a1, alpha=None)", torch.add),
    "div": ("ltorch.div(a0, a1, rounding_mode=None)", torch.div),
    "mul": ("ltorch.mul(a0, a1)", torch.mul),
    # the Tensor methods of methods_expect_builtin_promote (__div__ is Python 2's name: __truediv__)
    "__eq__": ("ltorch.eq(a0, a1)", lambda a, b: a == b),
    "__ge__": ("ltorch.ge(a0, a1)", lambda a, b: a >= b),
    "__gt__": ("ltorch.gt(a0, a1)", lambda a, b: a > b),
    "__le__": ("ltorch.le(a0, a1)", lambda a, b: a <= b),
    "__lt__": ("ltorch.lt(a0, a1)", lambda a, b: a < b),
    "__ne__": ("ltorch.ne(a0, a1)", lambda a, b: a != b),
    "__add__": ("ltorch.add(a0, a1, alpha=None)", lambda a, b: a + b),
    "__div__": ("ltorch.div(a0, a1, rounding_mode=None)", lambda a, b: a / b),
    "__mul__": ("ltorch.mul(a0, a1)", lambda a, b: a * b),
}
# ops of the lists thunder-c does not have (conv_tbc, pooling, padding, most losses)
ABSENT = {"addbmm", "conv_tbc", "poisson_nll_loss", "cosine_embedding_loss", "hinge_embedding_loss",
          "margin_ranking_loss", "triplet_margin_loss", "binary_cross_entropy_with_logits", "avg_pool3d",
          "binary_cross_entropy", "reflection_pad1d", "nll_loss2d", "l1_loss", "smooth_l1_loss",
          "multilabel_margin_loss", "soft_margin_loss", "multi_margin_loss", "huber_loss",
          "_addmm_activation", "prelu", "_native_multi_head_attention"}
# the lists' names: torch >= 2.1 says torch_16/nn_16 for the lower-precision lists
LIST_NAMES = ("torch_16", "torch_fp32", "nn_16", "nn_fp32", "torch_need_autocast_promote",
              "torch_expect_builtin_promote", "methods_expect_builtin_promote")


def list_cases():
    cases = []
    for list_name in LIST_NAMES:
        for entry in getattr(LISTS, list_name):
            name, args = entry[0], entry[1]
            if name in ABSENT:
                continue
            assert name in TORCH_OPS, f"{list_name}: op {name} is neither mapped nor known to be absent"
            if list_name == "torch_need_autocast_promote":
                args = tuple(args[0])  # one list argument: its tensors become a0, a1
                call_eager = (lambda f: lambda *xs: f(list(xs)))(TORCH_OPS[name][1])
            else:
                call_eager = TORCH_OPS[name][1]
            cases.append(pytest.param(name, args, call_eager, id=f"{list_name}-{name}"))
    return cases


def eager_autocast(fn, args):
    with torch.autocast("cpu", torch.bfloat16):
        return fn(*args)


def check(got, hdr, want, what):
    """got: numpy array from the CLI (bf16 decoded to float32), hdr: the output file's header bytes."""
    assert list(got.shape) == list(want.shape), (what, got.shape, want.shape)
    if want.dtype == torch.bfloat16:
        assert b'"BF16"' in hdr, (what, "expected a bfloat16 output", hdr[:200])
        got_t, want_t = torch.from_numpy(got.copy()), want.float()
    else:
        assert b'"BF16"' not in hdr, (what, "unexpected bfloat16 output")
        got_t, want_t = torch.from_numpy(got.copy()), want
        assert got_t.dtype == want.dtype, (what, got_t.dtype, want.dtype)
    if want.dtype == torch.bool:
        assert torch.equal(got_t, want_t), what
        return
    scale = max(1.0, float(want_t.abs().max())) if want_t.numel() else 1.0
    torch.testing.assert_close(got_t.double(), want_t.double(), rtol=1e-2, atol=1e-2 * scale, msg=what)


def run(cli, tmp_path, stmt, args, *extra):
    inputs = {f"a{i}": a for i, a in enumerate(args)}
    return traceprog.run(cli, tmp_path, ["out = " + stmt], inputs, *extra)


@pytest.mark.parametrize("name,args,fn", list_cases())
def test_cpu_autocast_lists(cli, tmp_path, name, args, fn):
    stmt = TORCH_OPS[name][0]
    want = eager_autocast(fn, args)
    got, hdr = run(cli, tmp_path, stmt, args, "--autocast", "bf16")
    check(got, hdr, want, stmt)


def test_lists_are_covered():
    """The lists this test runs: everything thunder-c has of the installed torch's CPU autocast lists."""
    ids = {p.id for p in list_cases()}
    for need in ("torch_16-mm", "torch_16-bmm", "torch_16-matmul", "torch_16-addmm",
                 "torch_16-baddbmm", "torch_16-conv2d", "torch_16-conv_transpose3d", "nn_16-linear", "nn_fp32-nll_loss", "nn_fp32-mse_loss",
                 "torch_need_autocast_promote-cat", "torch_need_autocast_promote-stack",
                 "methods_expect_builtin_promote-__add__"):
        assert need in ids


def test_autocast_changes_the_result(cli, tmp_path):
    """Without --autocast the same mm runs in float32 (the feature is what makes the lists pass)."""
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    got, hdr = run(cli, tmp_path, "ltorch.mm(a0, a1)", (a, b))
    check(got, hdr, a @ b, "mm without autocast")
    got, hdr = run(cli, tmp_path, "ltorch.mm(a0, a1)", (a, b), "--autocast", "bf16")
    assert b'"BF16"' in hdr


R = lambda *s, dtype=torch.float32: torch.randn(*s, dtype=dtype)
POS = lambda *s, dtype=torch.float32: (torch.rand(*s) + 0.5).to(dtype)

# more ops and Thunder's scenarios: (statement over a0, a1, ..., args, eager callable). The CLI applies the
# function path to a parsed trace, which must be valid without autocast: the mixed-dtype programs
# (bf16 x with f32 w, for a linear and a 3-D @ 2-D matmul) only record inside a region (tests/unit/test_autocast.c).
MORE = [
    # seed 000: a prim called directly in an autocast region
    ("prims.linear(a0, a1, None)", (R(16, 16), R(16, 16)), lambda x, w: F.linear(x, w)),
    ("prims.matmul(a0, a1)", (R(4, 8), R(8, 3)), torch.matmul),
    # on the CPU: linear with a bias, three converts
    ("ltorch.linear(a0, a1, a2)", (R(8, 16), R(4, 16), R(4)), F.linear),
    # 3-D @ 2-D
    ("ltorch.matmul(a0, a1)", (R(3, 1, 2), R(2, 3)), torch.matmul),
    # float64 is never cast
    ("ltorch.matmul(a0, a1)", (R(4, 4, dtype=torch.float64), R(4, 4, dtype=torch.float64)), torch.matmul),
    # on PyTorch's CPU float32 list (autocast_mode.cpp), outside its test lists
    ("ltorch.prod(a0)", (POS(8, dtype=torch.bfloat16),), torch.prod),
    ("ltorch.cross_entropy(a0, a1)", (R(8, 8, dtype=torch.bfloat16), torch.randint(0, 8, (8,))), F.cross_entropy),
    # CUDA autocast runs these in float32; CPU autocast leaves them in bfloat16
    ("ltorch.exp(a0)", (R(8, dtype=torch.bfloat16),), torch.exp),
    ("ltorch.log(a0)", (POS(8, dtype=torch.bfloat16),), torch.log),
    ("ltorch.pow(a0, 2)", (R(8, dtype=torch.bfloat16),), lambda a: torch.pow(a, 2)),
    ("ltorch.sum(a0)", (R(8, 8, dtype=torch.bfloat16),), torch.sum),
    ("ltorch.softmax(a0, -1)", (R(4, 8, dtype=torch.bfloat16),), lambda a: torch.softmax(a, -1)),
    ("ltorch.log_softmax(a0, -1)", (R(4, 8, dtype=torch.bfloat16),), lambda a: torch.log_softmax(a, -1)),
    ("ltorch.layer_norm(a0, [8])", (R(4, 8, dtype=torch.bfloat16),), lambda a: F.layer_norm(a, [8])),
    # ops with no policy keep their input dtype
    ("ltorch.gelu(a0)", (R(8, dtype=torch.bfloat16),), F.gelu),
    ("ltorch.mean(a0)", (R(8, 8),), torch.mean),
]


@pytest.mark.parametrize("stmt,args,fn", MORE, ids=[f"{i}-{m[0].split('(')[0]}" for i, m in enumerate(MORE)])
def test_more_ops_and_scenarios(cli, tmp_path, stmt, args, fn):
    want = eager_autocast(fn, args)
    got, hdr = run(cli, tmp_path, stmt, args, "--autocast", "bf16")
    check(got, hdr, want, stmt)


PROGRAMS = {
    # test_thunder_autocast_transform's f, g, h (seed 001 is h)
    "f": (["t0 = ltorch.add(a0, a1, alpha=None)", "out = ltorch.matmul(a2, t0)"], lambda b, c, a: a @ (b + c)),
    "g": (["t0 = ltorch.add(a0, a1, alpha=None)", "out = ltorch.sub(t0, a2, alpha=None)"], lambda a, b, c: a + b - c),
    "h": (["t0 = ltorch.matmul(a0, a1)", "out = ltorch.add(t0, a2, alpha=None)"], lambda a, b, c: (a @ b) + c),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_thunder_autocast_transform_programs(cli, tmp_path, name):
    stmts, fn = PROGRAMS[name]
    args = (R(2, 2), R(2, 2), R(2, 2))
    want = eager_autocast(fn, args)
    inputs = {f"a{i}": a for i, a in enumerate(args)}
    got, hdr = traceprog.run(cli, tmp_path, stmts, inputs, "--autocast", "bf16")
    check(got, hdr, want, name)


def test_seed001_trace_through_check(cli, tmp_path):
    """`check --autocast bf16` prints (and verifies) the autocast trace of h: convert a, convert b,
    a bf16 matmul, and an add that converts the product back to f32."""
    prog = tmp_path / "h.py"
    prog.write_text("def computation(a, b, c):\n"
                    '  # a: "cpu f32[2, 2]"\n  # b: "cpu f32[2, 2]"\n  # c: "cpu f32[2, 2]"\n'
                    "  t0 = ltorch.matmul(a, b)  # t0: \"cpu f32[2, 2]\"\n"
                    "  t1 = ltorch.add(t0, c, alpha=None)  # t1: \"cpu f32[2, 2]\"\n"
                    "  return t1\n")
    p = cli("check", prog, "--autocast", "bf16")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "# Constructed by Autocast (took " in out
    body = [l.strip() for l in out.splitlines() if re.match(r"^  \w", l)]
    assert re.match(r"\w+ = prims\.convert_element_type\(a, dtypes\.bfloat16\)  # \w+: \"cpu bf16\[2, 2\]\"", body[0])
    assert re.match(r"\w+ = prims\.convert_element_type\(b, dtypes\.bfloat16\)", body[1])
    assert re.match(r"\w+ = ltorch\.matmul\(\w+, \w+\)  # \w+: \"cpu bf16\[2, 2\]\"", body[2])
    assert re.match(r"\w+ = ltorch\.add\(\w+, c, alpha=None\)  # \w+: \"cpu f32\[2, 2\]\"", body[3])
    assert body[4].startswith("return ")
    assert re.search(r"# \w+ = prims\.convert_element_type\(\w+, dtypes\.float32\)  # \w+: \"cpu f32\[2, 2\]\"", out)
    # without the flag: no converts
    p = cli("check", prog)
    assert p.returncode == 0 and "convert_element_type(a" not in p.stdout


def test_f16_autocast(cli, tmp_path):
    """--autocast f16 (PyTorch 1.13's CPU autocast has no float16: the reference is computed by hand,
    float16 operands multiplied in float32 and rounded to float16)."""
    a, b = R(4, 8), R(8, 3)
    got, hdr = run(cli, tmp_path, "ltorch.matmul(a0, a1)", (a, b), "--autocast", "f16")
    assert got.dtype == np.float16
    want = (a.half().float() @ b.half().float()).half()
    check(got, hdr, want, "f16 matmul")


def test_flag_errors_and_help(cli, tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text('def computation(a):\n  # a: "cpu f32[2, 2]"\n  t0 = ltorch.matmul(a, a)  # t0: "cpu f32[2, 2]"\n'
                    "  return t0\n")
    for bad in (["run", prog, "--random-inputs", "0", "--autocast", "f32"], ["check", prog, "--autocast", "int8"],
                ["check", prog, "--autocast"], ["run", prog, "--autocast", "bf16", "--autocast", "bf16"]):
        p = cli(*bad)
        assert p.returncode == 2, (bad, p.stderr)
        assert "--autocast" in p.stderr
    p = cli("--help")
    assert p.returncode == 0 and "--autocast bf16|f16" in p.stdout
