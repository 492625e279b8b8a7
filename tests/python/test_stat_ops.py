"""einsum, median / nanmedian, mode, cdist and pdist against eager PyTorch and NumPy float64, for what
the OpInfo runs do not reach: einsum with ellipses that broadcast, repeated indices (diagonals), the
implicit output, three operands and bfloat16 under autocast; the lower median of even-length rows, NaN
rows and the gradient shared by tied medians; mode's index among ties on every path of ATen's kernel
(rows under and over std::sort's 16-element insertion threshold); cdist's matmul path past 25 rows and
its batch broadcasting; and the errors of bad equations."""
import numpy as np
import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


# ---- einsum ---------------------------------------------------------------------------------------------

EINSUM_CASES = [
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),  # ellipses of different ranks broadcasting
    ("b...d,b...d->b...", [(2, 3, 1, 4), (2, 1, 5, 4)]),
    ("ii->i", [(4, 4)]),  # a repeated index: the diagonal
    ("ii", [(4, 4)]),  # the trace (implicit output: nothing occurs once)
    ("iij,jk->ik", [(3, 3, 2), (2, 5)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),  # implicit output: b, i, k in alphabetical order
    ("ba", [(3, 4)]),  # implicit output transposes
    ("Ab,ab->Aa", [(2, 3), (4, 3)]),  # upper-case labels sort before lower-case ones
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("i,j,k->ijk", [(2,), (3,), (4,)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,j->i", [(3, 1), (4,)]),  # a contracted length-1 dim against a longer one
    (" i j , j k -> i k ", [(2, 3), (3, 4)]),  # spaces
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES, ids=[c[0].replace(" ", "_") for c in EINSUM_CASES])
def test_einsum_against_numpy_and_eager(eq, shapes):
    xs = [_rand(*s, seed=i) for i, s in enumerate(shapes)]
    got = thunder_c.jit(lambda *a: torch.einsum(eq, *a))(*xs)
    want = torch.einsum(eq, *xs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)
    ref = np.einsum(eq.replace(" ", ""), *[x.numpy() for x in xs])
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_einsum_list_and_sublist_forms():
    a, b = _rand(2, 3), _rand(3, 4, seed=1)
    want = a @ b
    torch.testing.assert_close(thunder_c.jit(lambda x, y: torch.einsum("ij,jk", [x, y]))(a, b), want)
    torch.testing.assert_close(thunder_c.jit(lambda x, y: torch.einsum(x, [0, 1], y, [1, 2], [0, 2]))(a, b), want)


def test_einsum_gradients():
    a, b = _rand(2, 3, 3), _rand(3, 4, seed=1)
    res = []
    for f in (lambda x, y: torch.einsum("bii,ik->bk", x, y), None):
        f = f or thunder_c.jit(lambda x, y: torch.einsum("bii,ik->bk", x, y))
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        f(x, y).pow(2).sum().backward()
        res.append((x.grad, y.grad))
    torch.testing.assert_close(res[0], res[1])


def test_einsum_bf16_under_autocast():
    a, b = _rand(4, 8).float(), _rand(8, 5, seed=1).float()
    f = lambda x, y: torch.einsum("ij,jk->ik", x, y)  # noqa: E731
    jf = thunder_c.jit(f)
    with torch.autocast("cpu", torch.bfloat16):
        want = f(a, b)
        got = jf(a, b)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("eq,shapes,msg", [
    ("ij,jk->ik", [(2, 3)], "fewer operands"),
    ("ij->ij", [(2, 3), (3, 2)], "more operands"),
    ("ijk->i", [(2, 3)], "number of subscripts"),
    ("ij->k", [(2, 3)], "does not appear"),
    ("ii->i", [(2, 3)], "repeated"),
    ("i,i->i", [(2,), (3,)], "broadcast"),
])
def test_einsum_errors(eq, shapes, msg):
    xs = [torch.ones(s) for s in shapes]
    with pytest.raises(RuntimeError):
        torch.einsum(eq, *xs)
    with pytest.raises(RuntimeError, match=msg):
        thunder_c.jit(lambda *a: torch.einsum(eq, *a))(*xs)


# ---- median / nanmedian ---------------------------------------------------------------------------------

def test_median_of_even_length_is_the_lower_middle():
    x = _rand(4, 6)
    got = thunder_c.jit(lambda t: torch.median(t, 1))(x)
    srt = np.sort(x.numpy(), axis=1)
    np.testing.assert_array_equal(got[0].numpy(), srt[:, 2])  # (6 - 1) // 2, not NumPy's mean of two
    np.testing.assert_array_equal(got[1].numpy(), np.argsort(x.numpy(), axis=1, kind="stable")[:, 2])
    np.testing.assert_array_equal(thunder_c.jit(torch.median)(x).numpy(), np.sort(x.numpy().ravel())[11])


def test_median_ties_and_nans_match_eager():
    x = torch.tensor([[2., 1., 2., 2., 1., 3.], [1., float("nan"), 0., float("nan"), 5., 1.],
                      [float("nan")] * 6, [4., 4., 4., 4., 4., 4.]])
    for f in (torch.median, torch.nanmedian):
        for keepdim in (False, True):
            want = f(x, 1, keepdim)
            got = thunder_c.jit(lambda t: f(t, 1, keepdim))(x)
            torch.testing.assert_close(got[0], want.values, equal_nan=True)
            torch.testing.assert_close(got[1], want.indices)
        torch.testing.assert_close(thunder_c.jit(f)(x[:2]), f(x[:2]), equal_nan=True)


@pytest.mark.parametrize("n", [4, 7, 37, 100])
def test_nanmedian_index_of_all_nan_rows_matches_eager(n):
    x = torch.full((2, n), float("nan"))
    x[1, n // 2] = 1.0
    want = torch.nanmedian(x, 1)
    got = thunder_c.jit(lambda t: torch.nanmedian(t, 1))(x)
    torch.testing.assert_close(got[1], want.indices)


def test_median_gradient_is_shared_by_ties():
    res = []
    for f in (torch.median, thunder_c.jit(torch.median)):
        x = torch.tensor([1., 2., 2., 3., 2., 0.], requires_grad=True)
        f(x).backward()
        res.append(x.grad)
    torch.testing.assert_close(res[1], res[0])
    torch.testing.assert_close(res[1], torch.tensor([0., 1., 1., 0., 1., 0.]) / 3)


# ---- mode -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [5, 16, 17, 64, 300])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.bool])
def test_mode_index_among_ties_matches_eager(n, dtype):
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-3, 4, (4, n), generator=g).to(dtype)
    for dim, keepdim in ((1, False), (1, True), (0, False)):
        want = torch.mode(x, dim, keepdim)
        got = thunder_c.jit(lambda t: torch.mode(t, dim, keepdim))(x)
        torch.testing.assert_close(got[0], want.values)
        torch.testing.assert_close(got[1], want.indices)


def test_mode_gradient_goes_to_the_selected_index():
    res = []
    for f in (lambda t: torch.mode(t, 1)[0], thunder_c.jit(lambda t: torch.mode(t, 1)[0])):
        x = torch.tensor([[1., 2., 2., 1., 2.], [3., 3., 0., 0., 1.]], requires_grad=True)
        f(x).sum().backward()
        res.append(x.grad)
    torch.testing.assert_close(res[1], res[0])


# ---- cdist / pdist --------------------------------------------------------------------------------------

def _np_dist(a, b, p):
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    if p == 0:
        return (d != 0).sum(-1).astype(a.dtype)
    if np.isinf(p):
        return d.max(-1)
    return (d ** p).sum(-1) ** (1 / p)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, float("inf")])
@pytest.mark.parametrize("shapes", [((30, 4), (7, 4)), ((2, 1, 5, 3), (4, 6, 3))], ids=["mm-path", "batched"])
def test_cdist_against_numpy(p, shapes):
    a, b = _rand(*shapes[0]), _rand(*shapes[1], seed=1)
    got = thunder_c.jit(lambda x, y: torch.cdist(x, y, p))(a, b)
    want = torch.cdist(a, b, p)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)
    np.testing.assert_allclose(got.numpy(), _np_dist(a.numpy(), b.numpy(), p), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 10.0, float("inf")])
def test_pdist_against_numpy(p):
    x = _rand(6, 3)
    got = thunder_c.jit(lambda t: torch.nn.functional.pdist(t, p))(x)
    i, j = np.triu_indices(6, 1)
    ref = _np_dist(x.numpy(), x.numpy(), p)[i, j]
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_cdist_errors():
    with pytest.raises(RuntimeError, match="same number of columns"):
        thunder_c.jit(torch.cdist)(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(RuntimeError, match="floating-point"):
        thunder_c.jit(torch.cdist)(torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="2D"):
        thunder_c.jit(torch.pdist)(torch.ones(3))


# ---- quantile / nanquantile -----------------------------------------------------------------------------

@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("fn", [torch.quantile, torch.nanquantile], ids=["quantile", "nanquantile"])
def test_quantile_modes_and_nans_match_eager(fn, interpolation):
    x = _rand(4, 7).float()
    x[1, 2] = x[2, 0] = x[2, 5] = float("nan")
    x[3] = float("nan")
    q = torch.tensor([0.0, 0.25, 0.5, 0.9, 1.0])
    for args in ((0.3, 1, False), (q, 1, True), (q, 0, False), (0.5, None, False), (q, None, True)):
        want = fn(x, args[0], args[1], args[2], interpolation=interpolation)
        got = thunder_c.jit(lambda t, qq: fn(t, qq, args[1], args[2], interpolation=interpolation))(x, args[0])
        assert got.shape == want.shape
        # the selecting modes are exact; linear / midpoint differ by ATen's vectorized (fused) lerp's rounding
        exact = interpolation in ("lower", "higher", "nearest")
        torch.testing.assert_close(got, want, equal_nan=True, **(dict(rtol=0, atol=0) if exact else {}))


def test_quantile_against_numpy():
    x = _rand(5, 8)
    q = torch.tensor([0.1, 0.5, 0.75], dtype=torch.float64)
    got = thunder_c.jit(lambda t, qq: torch.quantile(t, qq, dim=1))(x, q)
    np.testing.assert_allclose(got.numpy(), np.quantile(x.numpy(), q.numpy(), axis=1), rtol=1e-12, atol=1e-12)


# ---- max_unpool -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_unpool_inverts_max_pool_like_eager(n):
    pool = getattr(torch.nn.functional, f"max_pool{n}d")
    unpool = getattr(torch.nn.functional, f"max_unpool{n}d")
    for size, kw in ((8, {}), (7, {"output_size": (2, 3) + (7,) * n}), (7, {"output_size": (7,) * n})):
        x = _rand(2, 3, *([size] * n))
        y, idx = pool(x, 2, stride=2, return_indices=True)
        want = unpool(y, idx, 2, **kw)
        got = thunder_c.jit(lambda a, i: unpool(a, i, 2, **kw))(y, idx)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_max_unpool_bad_output_size():
    y, idx = torch.nn.functional.max_pool2d(torch.ones(1, 1, 4, 4), 2, return_indices=True)
    with pytest.raises(ValueError, match="output_size"):
        thunder_c.jit(lambda a, i: torch.nn.functional.max_unpool2d(a, i, 2, output_size=(9, 9)))(y, idx)
