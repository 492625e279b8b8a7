"""Powers in fused kernels: prims.pow with a constant integer exponent as mathlib's inlined powers
(PyTorch's own float forms for 2, 3, -1 and -2), every other float32 pow as mathlib's vectorized
th_m_powf. References: PyTorch eager, NumPy float64, and thunder-c's unfused executors."""
import glob
import math

import numpy as np
import pytest
import torch

import thunder_c

UNFUSED = ["blas", "eager"]

SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 3.0, -3.0, 2.5, -2.5,
            1e-45, -1e-45, 1e38, -1e38, 3.4028234663852886e38, 1.0000001, 0.99999994, 127.0, 128.0, -149.0,
            -150.0, 16777216.0, -16777215.0, 1e10, -1e10, 0.25]


def sample_f32(n=1 << 16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 4
    return torch.cat([x, torch.tensor(SPECIALS)])


def ulp_distance(a, ref64):
    """|a - ref| in float32 ulps of ref (a float32 tensor, ref its float64 reference)."""
    a64 = a.double()
    r32 = ref64.float()
    ulp = (torch.nextafter(r32.abs(), torch.tensor(math.inf)).double() - r32.abs().double())
    d = (a64 - ref64).abs() / ulp
    same_special = (a.isnan() & ref64.isnan()) | (a64 == ref64) | (r32.isinf() & (a == r32))
    return torch.where(same_special, torch.zeros_like(d), torch.nan_to_num(d, nan=math.inf))


def assert_pow_like(got, x, y):
    """got == pow(x, y) as C's powf: NaNs, infinities, zeros and signs exact, the rest within 1 ulp."""
    ref = torch.from_numpy(np.power(x.double().numpy(), np.asarray(y, dtype=np.float32).astype(np.float64)))
    with np.errstate(all="ignore"):
        npf = torch.from_numpy(np.power(x.numpy(), np.asarray(y, dtype=np.float32)))
    assert torch.equal(got.isnan(), npf.isnan())
    fin = ~npf.isnan()
    assert torch.equal(got[fin].isinf(), npf[fin].isinf())
    assert torch.equal(torch.signbit(got[fin]), torch.signbit(npf[fin]))
    assert torch.equal(got[fin] == 0, npf[fin] == 0)
    assert ulp_distance(got[fin], ref[fin]).max().item() <= 1.0


@pytest.mark.parametrize("n", [2, 3, -1, -2])
def test_pow_torch_forms_bit_identical_to_torch(n):
    x = sample_f32()
    f = lambda t: torch.pow(t, float(n)) * 1.0 * 1.0  # noqa: E731  (a second member makes a region)
    got = thunder_c.jit(f)(x)
    assert torch.equal(got.view(torch.int32)[~got.isnan()], f(x).view(torch.int32)[~got.isnan()])
    assert torch.equal(got.isnan(), f(x).isnan())


@pytest.mark.parametrize("n", [0, 1, 4, 5, 7, 8, 15, -3, -4, -8, -15])
def test_pow_integer_exponent_correctly_rounded(n):
    x = sample_f32()
    f = lambda t: torch.pow(t, n) * 1.0  # noqa: E731
    got = thunder_c.jit(f)(x)
    assert_pow_like(got, x, float(n))
    ref64 = torch.from_numpy(np.power(x.double().numpy(), float(n)))
    assert ulp_distance(got, ref64).max().item() <= 0.5 + 1e-6  # one rounding of an exact-enough double
    torch.testing.assert_close(got, thunder_c.jit(f, executors=UNFUSED)(x), rtol=1.2e-7, atol=0, equal_nan=True)
    torch.testing.assert_close(got, f(x), rtol=1.2e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("y", [2.5, -2.5, 0.3, 1.5, -0.75, 100.0 / 3.0, 1e10, -1e10, math.inf, -math.inf, math.nan])
def test_pow_noninteger_constant(y):
    x = torch.cat([sample_f32(), torch.rand(4096) * 2])
    f = lambda t: torch.pow(t, y) * 1.0  # noqa: E731
    got = thunder_c.jit(f)(x)
    assert_pow_like(got, x, y)
    unf = thunder_c.jit(f, executors=UNFUSED)(x)
    fin = ~unf.isnan()
    assert ulp_distance(got[fin], unf[fin].double()).max().item() <= 1.0


def test_pow_tensor_exponent_specials_and_accuracy():
    s = torch.tensor(SPECIALS)
    x = torch.cat([s.repeat_interleave(len(SPECIALS)), torch.rand(1 << 16) * 8, -torch.rand(4096) * 3])
    y = torch.cat([s.repeat(len(SPECIALS)), torch.randn(1 << 16) * 20,
                   torch.randint(-20, 20, (4096,)).float()])
    f = lambda a, b: torch.pow(a, b) * 1.0  # noqa: E731
    got = thunder_c.jit(f)(x, y)
    assert_pow_like(got, x, y.numpy())
    # torch's Sleef pow is within 1 ulp too, except that it flushes some subnormal results
    torch.testing.assert_close(got, f(x, y), rtol=2.4e-7, atol=1e-37, equal_nan=True)


def test_pow_float64_forms():
    x = torch.randn(5000, dtype=torch.float64) * 3
    for n in (2, 3, -1, -2, 5):
        f = lambda t: torch.pow(t, n) * 1.0  # noqa: E731
        got = thunder_c.jit(f)(x)
        if n in (2, 3, -1, -2):
            assert torch.equal(got, f(x))
        else:
            torch.testing.assert_close(got, f(x), rtol=4.5e-16, atol=0)


def test_new_gelu_matches_torch_and_kernel_has_no_scalar_pow(tmp_path):
    def new_gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    x = torch.randn(64, 512)
    got = thunder_c.jit(new_gelu, dump_fusions=str(tmp_path))(x)
    torch.testing.assert_close(got, new_gelu(x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got, thunder_c.jit(new_gelu, executors=UNFUSED)(x), rtol=1e-6, atol=1e-6)
    (src,) = glob.glob(str(tmp_path / "*.c"))
    body = open(src).read().split("==== the fusion regions ====")[1]
    assert "th_m_pownf((float)" in body and ", 3)" in body
    assert "pow(" not in body.replace("th_m_pownf(", "")
