"""Pooling and resampling through thunder_c.jit against PyTorch eager: F.max_pool1d/2d/3d (and their
return_indices / _with_indices spellings), avg_pool*, lp_pool*, adaptive_avg_pool*, adaptive_max_pool*,
interpolate's modes, pixel_shuffle / pixel_unshuffle / channel_shuffle, unfold / fold, and the
nn modules torchvision builds with them (nn.MaxPool2d, nn.AdaptiveAvgPool2d), forward and backward.

Max-pool indices are compared exactly (flat positions within each input plane), including PyTorch's
choice on ties (the first maximum of the window) and with NaN (a NaN wins: the value is NaN and the
index is the NaN's). Float64 results are held to 1e-12, float32 to 1e-5; bfloat16 computes in float32
and rounds once, so its results are compared with eager's within bf16 tolerance."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def R(*shape, seed=0, dtype=torch.float64, rg=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_(rg)


def tol(dtype):
    return {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 1.6e-2}[dtype]


def check(fn, x, grad=True):
    """fn(x) through thunder_c.jit equals eager (values; int outputs exactly), and so does the
    gradient of the first output with respect to x."""
    xe = x.detach().clone().requires_grad_(grad and x.is_floating_point())
    xj = x.detach().clone().requires_grad_(grad and x.is_floating_point())
    want, got = fn(xe), thunder_c.jit(fn)(xj)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(wants) == len(gots)
    for w, g in zip(wants, gots):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.is_floating_point():
            t = tol(w.dtype)
            torch.testing.assert_close(g, w, rtol=t, atol=t, equal_nan=True)
        else:
            assert torch.equal(g, w)
    if grad and x.is_floating_point():
        ct = R(*wants[0].shape, seed=7, dtype=wants[0].dtype)
        (ge,) = torch.autograd.grad(wants[0], xe, ct)
        (gj,) = torch.autograd.grad(gots[0], xj, ct)
        t = tol(x.dtype)
        torch.testing.assert_close(gj, ge, rtol=t, atol=t, equal_nan=True)


# ---- max pooling -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=3, padding=1, dilation=2, ceil_mode=True),
])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_max_pool2d_values_indices_grad(kw, dtype):
    x = R(2, 3, 9, 10, dtype=dtype)
    check(lambda t: F.max_pool2d(t, **kw), x)
    check(lambda t: F.max_pool2d(t, **kw, return_indices=True), x)
    check(lambda t: F.max_pool2d_with_indices(t, **kw), x)
    check(lambda t: torch.max_pool2d(t, **kw), x)


def test_max_pool1d_3d_and_unbatched():
    check(lambda t: F.max_pool1d(t, 3, 2, 1, return_indices=True), R(2, 4, 11))
    check(lambda t: F.max_pool1d(t, 2, ceil_mode=True), R(4, 11))  # unbatched (C, L)
    check(lambda t: F.max_pool3d(t, 2, 1, 1, 2, return_indices=True), R(2, 2, 5, 6, 7))
    check(lambda t: F.max_pool3d(t, (2, 3, 1), ceil_mode=True), R(3, 5, 6, 7))  # unbatched


def test_max_pool_ties_pick_the_first_maximum():
    # every window is constant: the index is the window's first (top-left) in-bounds element, and the
    # gradient goes there alone
    x = torch.ones(1, 1, 4, 4, dtype=torch.float64)
    _, idx = thunder_c.jit(lambda t: F.max_pool2d(t, 2, return_indices=True))(x)
    assert idx.flatten().tolist() == [0, 2, 8, 10]
    _, idx = thunder_c.jit(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True))(x)
    assert idx.flatten().tolist() == [0, 1, 4, 5]
    check(lambda t: F.max_pool2d(t, 3, 2, 1), x)


def test_max_pool_nan_propagates():
    x = R(1, 2, 6, 6)
    x[0, 0, 1, 1] = float("nan")
    x[0, 1, 4, 5] = float("nan")
    x[0, 1, 5, 4] = float("nan")  # two NaNs in one window: the last one's index (PyTorch's)
    check(lambda t: F.max_pool2d(t, 2, return_indices=True), x, grad=False)
    v, i = thunder_c.jit(lambda t: F.max_pool2d(t, 2, return_indices=True))(x)
    assert torch.isnan(v[0, 0, 0, 0]) and i[0, 0, 0, 0] == 7
    assert torch.isnan(v[0, 1, 2, 2]) and i[0, 1, 2, 2] == 5 * 6 + 4


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_max_pool_integers_exact(dtype):
    x = torch.randint(0, 100, (2, 3, 7, 7)).to(dtype)
    check(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True), x, grad=False)


def test_max_pool_errors():
    x = R(1, 2, 4, 4)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        thunder_c.jit(lambda t: F.max_pool2d(t, 2, padding=2))(x)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        thunder_c.jit(lambda t: F.max_pool2d(t, 5))(x)
    with pytest.raises(RuntimeError, match="3D or 4D"):
        thunder_c.jit(lambda t: F.max_pool2d(t, 2))(R(4, 4))
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        thunder_c.jit(lambda t: F.max_pool2d(t, 2))(x > 0)


def test_unsupported_boolean_dispatch_names_the_public_function():
    x = R(1, 2, 6, 6)
    with pytest.raises(NotImplementedError, match=r"torch\.nn\.functional\.fractional_max_pool2d is not supported"):
        thunder_c.jit(lambda t: F.fractional_max_pool2d(t, 2, output_size=3))(x)


# ---- average pooling ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 3), stride=1, divisor_override=5),
])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_avg_pool2d(kw, dtype):
    check(lambda t: F.avg_pool2d(t, **kw), R(2, 3, 8, 9, dtype=dtype))


def test_avg_pool1d_3d_and_int64():
    check(lambda t: F.avg_pool1d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False), R(2, 3, 10))
    check(lambda t: F.avg_pool3d(t, 2, 2, 1, divisor_override=3), R(1, 2, 5, 6, 7))
    x = torch.randint(-50, 50, (2, 3, 7, 7))
    check(lambda t: F.avg_pool2d(t, 3, 2, 1), x, grad=False)  # integer sum, truncating division


@pytest.mark.parametrize("p", [2, 1.5, 3, float("inf"), -float("inf")])
def test_lp_pool(p):
    x = R(2, 3, 8, 9)
    pos = x.abs() + 0.1  # fractional powers of negatives are NaN in eager too; keep them finite here
    check(lambda t: F.lp_pool2d(t, p, 3, 2), pos)
    check(lambda t: F.lp_pool2d(t, p, (2, 3), ceil_mode=True), pos)
    check(lambda t: F.lp_pool1d(t, p, 3), pos.flatten(2))
    check(lambda t: F.lp_pool3d(t, p, 2), pos.unsqueeze(0))
    if p in (2, 3):
        check(lambda t: nn.LPPool2d(p, 2)(t), x)
    with pytest.raises(ValueError, match="norm_type must be a non-zero value"):
        thunder_c.jit(lambda t: F.lp_pool2d(t, 0, 2))(x)


# ---- adaptive pooling --------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(1, 1), 1, (3, 5), (None, 4), (7, 7), (9, 11)])
def test_adaptive_avg_pool2d(size):
    check(lambda t: F.adaptive_avg_pool2d(t, size), R(2, 3, 9, 11))


def test_adaptive_avg_pool_global_is_a_mean():
    # torchvision's classification heads pool to (1, 1): recorded as ltorch.mean (the reduction kernels)
    jf = thunder_c.jit(lambda t: F.adaptive_avg_pool2d(t, (1, 1)))
    x = R(2, 8, 7, 7, dtype=torch.float32)
    torch.testing.assert_close(jf(x), F.adaptive_avg_pool2d(x, (1, 1)))
    text = str(thunder_c.last_traces(jf)[0])
    assert "mean" in text and "adaptive_avg_pool(" not in text


def test_adaptive_pool_1d_3d_and_max():
    check(lambda t: F.adaptive_avg_pool1d(t, 4), R(2, 3, 10))
    check(lambda t: F.adaptive_avg_pool3d(t, (2, None, 3)), R(2, 2, 5, 6, 7))
    check(lambda t: F.adaptive_max_pool2d(t, (3, 4), return_indices=True), R(2, 3, 9, 11))
    check(lambda t: F.adaptive_max_pool1d(t, 4, True), R(2, 3, 10))
    check(lambda t: F.adaptive_max_pool3d(t, 2), R(2, 5, 6, 7))
    check(lambda t: F.adaptive_max_pool2d(t, 4), R(2, 3, 9, 11, dtype=torch.bfloat16))


# ---- interpolate ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode,align", [
    ("nearest", None), ("nearest-exact", None), ("bilinear", False), ("bilinear", True),
    ("bicubic", False), ("bicubic", True), ("area", None),
])
@pytest.mark.parametrize("how", [dict(size=(5, 13)), dict(scale_factor=1.7), dict(scale_factor=(0.6, 2.5)),
                                 dict(scale_factor=2.3, recompute_scale_factor=True), dict(scale_factor=2)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_interpolate_2d(mode, align, how, dtype):
    check(lambda t: F.interpolate(t, mode=mode, align_corners=align, **how), R(2, 3, 6, 7, dtype=dtype))


def test_interpolate_1d_3d_bf16_and_upsample():
    check(lambda t: F.interpolate(t, size=15, mode="linear"), R(2, 3, 6))
    check(lambda t: F.interpolate(t, scale_factor=1.5, mode="linear", align_corners=True), R(2, 3, 6))
    check(lambda t: F.interpolate(t, scale_factor=(1.5, 2, 0.7), mode="trilinear"), R(1, 2, 4, 5, 6))
    check(lambda t: F.interpolate(t, size=(3, 7, 4), mode="nearest"), R(1, 2, 4, 5, 6))
    check(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), R(2, 3, 6, 7, dtype=torch.bfloat16))
    with pytest.warns(UserWarning):
        check(lambda t: F.upsample_nearest(t, scale_factor=2), R(2, 3, 5, 5))
    with pytest.warns(UserWarning):
        check(lambda t: F.upsample_bilinear(t, size=(8, 9)), R(2, 3, 5, 5))


def test_interpolate_nearest_uint8_images():
    x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    check(lambda t: F.interpolate(t, scale_factor=1.7), x, grad=False)
    check(lambda t: F.interpolate(t, size=(9, 4), mode="nearest-exact"), x, grad=False)
    with pytest.raises(NotImplementedError, match="uint8 tensor with mode='bilinear' is not supported"):
        thunder_c.jit(lambda t: F.interpolate(t, size=3, mode="bilinear"))(x)


def test_interpolate_errors():
    x = R(1, 2, 4, 4)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        thunder_c.jit(lambda t: F.interpolate(t, size=3, scale_factor=2))(x)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        thunder_c.jit(lambda t: F.interpolate(t, size=3, align_corners=True))(x)
    with pytest.raises(NotImplementedError, match="bilinear mode needs 4D input"):
        thunder_c.jit(lambda t: F.interpolate(t, size=3, mode="bilinear"))(R(1, 2, 4))
    with pytest.raises(NotImplementedError, match="antialias=True is not supported"):
        thunder_c.jit(lambda t: F.interpolate(t, size=3, mode="bilinear", antialias=True))(x)


# ---- shuffles, unfold, fold ----------------------------------------------------------------------------------


def test_shuffles():
    check(lambda t: F.pixel_shuffle(t, 2), R(2, 12, 3, 4))
    check(lambda t: F.pixel_shuffle(t, 3), R(5, 2, 9, 2, 2))  # extra leading dims
    check(lambda t: F.pixel_unshuffle(t, 2), R(2, 3, 4, 6))
    check(lambda t: F.channel_shuffle(t, 3), R(2, 6, 3, 4), grad=False)
    x = torch.arange(2 * 6 * 2, dtype=torch.int64).reshape(2, 6, 2)
    check(lambda t: torch.channel_shuffle(t, 2), x, grad=False)
    with pytest.raises(RuntimeError, match="divisible by the square of upscale_factor"):
        thunder_c.jit(lambda t: F.pixel_shuffle(t, 3))(R(1, 8, 2, 2))


def test_unfold_fold():
    check(lambda t: F.unfold(t, 3, padding=1, stride=2), R(2, 3, 7, 8))
    check(lambda t: F.unfold(t, (2, 3), dilation=(2, 1)), R(3, 7, 8))  # unbatched
    check(lambda t: F.unfold(t, 2), R(2, 3, 4, 5) > 0, grad=False)  # bool moves as is
    check(lambda t: F.fold(t, (5, 6), 2), R(2, 3 * 4, 20))
    check(lambda t: F.fold(t, (7, 8), 3, padding=1, stride=2), R(3 * 9, 16))


# ---- modules ---------------------------------------------------------------------------------------------------


def test_torchvision_style_modules_forward_backward():
    torch.manual_seed(0)

    def make():
        return nn.Sequential(nn.MaxPool2d(3, 2, 1), nn.Tanh(), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
                             nn.Linear(4, 3))

    m = make()
    mj = make()
    mj.load_state_dict(m.state_dict())
    tm = thunder_c.jit(mj)
    x, xj = R(2, 4, 11, 12, dtype=torch.float32, rg=True), R(2, 4, 11, 12, dtype=torch.float32, rg=True)
    lw, lj = m(x).pow(2).sum(), tm(xj).pow(2).sum()
    torch.testing.assert_close(lj, lw)
    lw.backward()
    lj.backward()
    torch.testing.assert_close(xj.grad, x.grad)
    for (n1, p1), (_, p2) in zip(m.named_parameters(), mj.named_parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, msg=n1)

    pool = nn.MaxPool2d(2, return_indices=True)
    v, i = thunder_c.jit(pool)(R(1, 2, 6, 6))
    ve, ie = pool(R(1, 2, 6, 6))
    assert torch.equal(v, ve) and torch.equal(i, ie)


def test_autocast_cpu_runs_3d_pools_in_float32():
    # PyTorch's CPU autocast float32 list has the 3-d pools; the 2-d ones run in the input's dtype
    x5, x4 = R(1, 2, 4, 6, 6, dtype=torch.bfloat16), R(1, 2, 6, 6, dtype=torch.bfloat16)
    for f, x in [(lambda t: F.max_pool3d(t, 2), x5), (lambda t: F.avg_pool3d(t, 2), x5),
                 (lambda t: F.adaptive_avg_pool3d(t, 2), x5), (lambda t: F.adaptive_max_pool3d(t, 2), x5),
                 (lambda t: F.max_pool2d(t, 2), x4), (lambda t: F.interpolate(t, scale_factor=2), x4)]:
        def g(t, f=f):
            with torch.autocast("cpu", torch.bfloat16):
                return f(t)
        want, got = g(x), thunder_c.jit(g)(x)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
