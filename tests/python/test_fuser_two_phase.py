"""A full reduction feeding elementwise consumers of the same input in one fusion region: the one-row
nest's result (a 0-d value) used by its own output pass (seed 003's fp8 scaling: amax -> scale ->
multiply -> cast), against PyTorch eager and thunder-c's unfused executors."""
import sys
import pathlib

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import import_thunder_c  # noqa: E402

thunder_c = import_thunder_c()
UNFUSED = ["blas", "eager"]


def top_level(jfn):
    """The execution trace's top-level statements (region members are indented comments)."""
    lines = str(thunder_c.last_traces(jfn)[-1]).splitlines()
    return [ln.strip() for ln in lines if ln.startswith("  ") and not ln.lstrip().startswith("#")]


def regions(jfn):
    return [ln for ln in top_level(jfn) if "= fusion" in ln]


def fp8_scale(x):
    amax = x.abs().amax()
    scale = 448.0 / torch.clamp(amax, min=1e-12)
    return (x * scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


def test_fp8_amax_scale_cast_is_one_region_and_exact():
    x = torch.randn(512, 384) * 7
    x[3, 5] = -1e4  # the amax
    j = thunder_c.jit(fp8_scale)
    y, s = j(x)
    assert len(regions(j)) == 1 and not any("prims." in ln for ln in top_level(j)), top_level(j)
    check_fp8(fp8_scale, x, y, s)


def check_fp8(f, x, y, s):
    """y, s = f(x) bit for bit as the unfused executors give them, s within an ulp of torch's (torch's
    `448.0 / t` is reciprocal(t) * 448, two roundings; thunder-c divides), y as torch casts with s."""
    uy, us = thunder_c.jit(f, executors=UNFUSED)(x)
    assert torch.equal(s, us) and torch.equal(y.view(torch.uint8), uy.view(torch.uint8))
    torch.testing.assert_close(s, f(x)[1], rtol=1.2e-7, atol=0)
    ry = (x.float() * s).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(y.view(torch.uint8), ry.view(torch.uint8))


def test_fp8_chain_from_bf16_and_strided_input():
    x = (torch.randn(256, 640) * 3).bfloat16()
    for t in (x, x.t(), x[:, ::2]):
        f = lambda a: fp8_scale(a.float())  # noqa: E731
        y, s = thunder_c.jit(f)(t)
        check_fp8(f, t, y, s)


def test_normalize_by_full_sum_and_mean():
    x = torch.rand(300, 500, dtype=torch.float32) + 0.1
    cases = [lambda a: a / a.sum(), lambda a: a - a.mean(), lambda a: (a - a.mean()) * torch.rsqrt(a.var())]
    for f in cases:
        j = thunder_c.jit(f)
        got = j(x)
        assert len(regions(j)) == 1, top_level(j)
        torch.testing.assert_close(got, f(x), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got, thunder_c.jit(f, executors=UNFUSED)(x), rtol=1e-5, atol=1e-6)


def test_nan_and_empty_and_single_element():
    x = torch.randn(64, 64)
    x[1, 2] = float("nan")
    y, s = thunder_c.jit(fp8_scale)(x)
    ry, rs = fp8_scale(x)
    assert s.isnan() and rs.isnan()
    assert torch.equal(y.float().isnan(), ry.float().isnan())
    one = torch.tensor([[2.5]])
    f = lambda a: a / a.sum()  # noqa: E731
    torch.testing.assert_close(thunder_c.jit(f)(one), f(one))
    e = torch.zeros(0, 4)
    g = lambda a: a * a.sum() + 1.0  # noqa: E731
    assert thunder_c.jit(g)(e).shape == (0, 4)


def test_scalar_operands_the_region_cannot_hold_stay_correct():
    x = torch.randn(128, 256)
    s = torch.tensor(1.5)
    cases = [
        (lambda a, b: (a * b).exp() + 1.0, (x, s)),  # a 0-d region input
        (lambda a, b: torch.softmax(a, -1) * a.amax(), (x, s)),  # a full result in a row nest's domain
        (lambda a, b: (a - a.sum(0)) * a.sum(), (x, s)),  # a column nest and a full reduction
    ]
    for f, args in cases:
        got, ref = thunder_c.jit(f)(*args), f(*args)
        tol = dict(rtol=1e-4, atol=1e-5 * ref.abs().max().item())  # exp's last bits, sums' order
        torch.testing.assert_close(got, ref, **tol)
        torch.testing.assert_close(got, thunder_c.jit(f, executors=UNFUSED)(*args), **tol)
