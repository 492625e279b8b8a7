"""The special functions (digamma, erfinv, zeta, i0, i0e, i1, i1e, ndtri and the orthogonal polynomials as
prims; polygamma, mvlgamma, ndtr, entr as composites; ops/special_scalar.h, src/ops/torch/elementwise_more.c)
against PyTorch eager on grids that reach their poles, branch points and asymptotic ranges, in float32 and
float64, through the fuser and the eager executor; and the gradients PyTorch defines for them."""
import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()

GRID = torch.cat([torch.linspace(-6.5, 6.5, 131), torch.tensor([0.0, -0.0, -1.0, -2.0, 1e-8, 10.0, 10.5, 1e3, 1e18,
                                                               float("inf"), float("nan")])])
UNIT = torch.cat([torch.linspace(-1.0, 1.0, 101), torch.tensor([0.69999, 0.70001, -0.7, 1.5, -1.5, float("nan")])])

CASES = {
    "digamma": (torch.digamma, GRID),
    "erfinv": (torch.erfinv, UNIT),
    "polygamma1": (lambda t: torch.polygamma(1, t), GRID),
    "polygamma3": (lambda t: torch.polygamma(3, t), GRID[GRID.abs() < 1e3]),
    "method_polygamma2": (lambda t: t.polygamma(2), GRID[GRID.abs() < 1e3]),
    "zeta": (lambda t: torch.special.zeta(t.abs() + 1.0, 2.5), GRID),
    "zeta_q": (lambda t: torch.special.zeta(3.0, t), GRID),
    "mvlgamma": (lambda t: torch.mvlgamma(t.abs() + 2.5, 3), GRID),
    "ndtr": (torch.special.ndtr, GRID),
    "entr": (torch.special.entr, GRID),
    "i0": (torch.i0, GRID[GRID.abs() < 80]),
    "i0e": (torch.special.i0e, GRID),
    "i1": (torch.special.i1, GRID[GRID.abs() < 80]),
    "i1e": (torch.special.i1e, GRID),
    "ndtri": (torch.special.ndtri, torch.cat([UNIT.abs(), torch.tensor([1e-20, 1e-300, 0.13, 0.87, 1 - 1e-12])])),
}


POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", POLYS)
def test_polynomials_match_torch(name, dtype):
    """Degrees 0..12 (past the trigonometric forms' thresholds), a negative and a fractional degree, on
    [-1.2, 1.2] with the endpoints +-1 and 0."""
    fn = getattr(torch.special, name)
    x = torch.cat([torch.linspace(-1.2, 1.2, 25), torch.tensor([1.0, -1.0, 0.0])]).to(dtype)
    n = torch.tensor([float(k) for k in range(13)] + [-1.0, 2.7]).to(dtype)
    xx, nn = x[:, None].expand(-1, n.numel()), n[None, :].expand(x.numel(), -1)
    torch.testing.assert_close(thunder_c.jit(fn)(xx, nn), fn(xx, nn), equal_nan=True)
    torch.testing.assert_close(thunder_c.jit(lambda t: fn(t, 3))(x), fn(x, 3), equal_nan=True)


def test_polynomial_refuses_bfloat16():
    with pytest.raises(NotImplementedError, match="not implemented for 'BFloat16'"):
        thunder_c.jit(lambda t: torch.special.chebyshev_polynomial_t(t, 2))(torch.ones(3, dtype=torch.bfloat16))


@pytest.mark.parametrize("executors", [None, ["eager"]], ids=["default", "eager"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", CASES)
def test_matches_torch(name, dtype, executors):
    fn, x = CASES[name]
    x = x.to(dtype)
    jf = thunder_c.jit(fn) if executors is None else thunder_c.jit(fn, executors=executors)
    torch.testing.assert_close(jf(x), fn(x), equal_nan=True, rtol=4e-6 if dtype == torch.float32 else 1e-12,
                               atol=1e-6 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("fn", [torch.digamma, torch.erfinv, lambda t: torch.polygamma(2, t),
                                lambda t: torch.special.zeta(2.5, t), lambda t: torch.mvlgamma(t, 2), torch.i0,
                                torch.special.i0e, torch.special.i1, torch.special.i1e, torch.special.ndtri])
def test_gradients_match_torch(fn):
    x = torch.linspace(0.55, 0.95, 9, dtype=torch.float64, requires_grad=True)
    xe = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(thunder_c.jit(fn)(x).sum(), x)
    (ge,) = torch.autograd.grad(fn(xe).sum(), xe)
    torch.testing.assert_close(g, ge, rtol=1e-10, atol=1e-10)


def test_integer_input_promotes_to_float32():
    x = torch.arange(1, 6)
    for fn in (torch.digamma, torch.special.ndtr, lambda t: torch.polygamma(1, t), lambda t: torch.mvlgamma(t, 1)):
        got, want = thunder_c.jit(fn)(x), fn(x)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want)


def test_polygamma_negative_n_refused():
    with pytest.raises(RuntimeError, match="does not support negative n"):
        thunder_c.jit(lambda t: torch.polygamma(-1, t))(torch.ones(3))
