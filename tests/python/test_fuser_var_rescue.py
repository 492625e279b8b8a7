"""The float64 Welford rescue of fused row var/var_mean (src/executors/fuser/codegen.c emit_welford):
torch.var_mean / var / std / std_mean of `x * 1.0` (the multiply puts the reduction in a fusion region)
through thunder_c.jit, fused and with executors=["eager"], against PyTorch on the same inputs: rows
holding inf, -inf or NaN at the first, a middle or the last position, all-inf rows, float64 rows near
1.7e308 (whose float64 sum or squares overflow), size-0 and size-1 rows, corrections 0, 1 and 2, reduced
dims -1, (1, 2) and all, transposed / sliced / expanded inputs, a normalization consuming the mean and
var in the same region, and batches big enough to run on several threads. NaN positions must be equal
and finite values equal to float rounding. The C side: tests/unit/test_fuser_var_rescue.c."""
import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()

INF, NAN = float("inf"), float("nan")
F64 = torch.float64
DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
EXECUTORS = [None, ["eager"]]


@pytest.fixture(autouse=True, scope="module")
def kernel_cache(tmp_path_factory):
    """Kernels of this module go to a cache of its own (pytest's base temp, under /tmp)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("varrescue")))
    mp.delenv("THUNDER_CACHE_MAX_MB", raising=False)
    yield
    mp.undo()


def assert_like_torch(got, want, what, atol=1e-300):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k, g.shape, w.shape, g.dtype, w.dtype)
        gn, wn = torch.isnan(g), torch.isnan(w)
        assert torch.equal(gn, wn), (what, k, "NaN positions", gn.nonzero().tolist(), wn.nonzero().tolist())
        tol = {F64: 1e-12, torch.float32: 1e-5}.get(g.dtype, 1e-2)
        gf, wf = g[~wn].double(), w[~wn].double()
        assert torch.equal(torch.isinf(gf), torch.isinf(wf)), (what, k, gf, wf)
        fin = torch.isfinite(wf)
        assert torch.equal(gf[~fin], wf[~fin]), (what, k, "infinities")
        # atol: by default slack for float64 denormal means only (the mean of [0, 5e-324] rounds either way);
        # data of order 1 pass tol, for means that cancel to about 0
        assert torch.allclose(gf[fin], wf[fin], rtol=tol, atol=max(atol, 1e-300)), (what, k, gf[fin], wf[fin])


def check(fn, *args, what="", unit_scale=False):
    """fn through thunder_c.jit, fused and eager, against fn itself; unit_scale: the data are of order 1
    (results near 0 are compared absolutely, to the dtype's tolerance)."""
    want = fn(*args)
    for ex in EXECUTORS:
        got = thunder_c.jit(fn, executors=ex)(*args)
        atol = {F64: 1e-12, torch.float32: 1e-5}.get(args[0].dtype, 1e-2) if unit_scale else 0
        assert_like_torch(got, want, f"{what} executors={ex}", atol)


def special_rows(dtype, n=7):
    """Rows of n: each special value first, in the middle, last; all-inf rows; mixed infinities; and,
    for float64, rows near the top of the range."""
    rows = []
    for v in (INF, -INF, NAN):
        for j in (0, n // 2, n - 1):
            r = [1.25] * n
            r[j] = v
            rows.append(r)
    rows += [[INF] * n, [-INF] * n, [INF, -INF] + [1.0] * (n - 2), [1.0] * (n - 2) + [INF, INF],
             [NAN] * n, [INF, NAN] + [1.0] * (n - 2)]
    if dtype == F64:
        rows += [[1.7e308] * n, [-1.7e308] * n, [1e306] * n, [1.7e308, -1.7e308] * (n // 2) + [0.0] * (n % 2),
                 [1e306] * (n - 1) + [1.0000000000000002e306], [1.7e308] * (n - 1) + [INF],
                 [8e307] * n, [1.7e308] * (n - 1) + [1.6e308]]
    rows.append([float(j) / 3 for j in range(n)])
    return torch.tensor(rows, dtype=F64).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_mean_special_rows(dtype, correction):
    x = special_rows(dtype)
    check(lambda t: torch.var_mean(t * 1.0, -1, correction=correction), x, what=f"{dtype} c={correction}")


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=str)
def test_var_std_spellings(dtype):
    x = special_rows(dtype)
    check(lambda t: torch.var(t * 1.0, -1), x, what="var")
    check(lambda t: torch.std(t * 1.0, -1, unbiased=False), x, what="std")
    check(lambda t: torch.std_mean(t * 1.0, -1, keepdim=True), x, what="std_mean")


def test_every_combination_of_three():
    """All rows of three drawn from ten values (specials, extremes, zeros, the smallest denormal), float64,
    corrections 0..3: var_mean and std_mean."""
    import itertools
    vals = [1.0, INF, -INF, NAN, 1.7e308, -1.7e308, 1e306, 0.0, -0.0, 5e-324]
    x = torch.tensor(list(itertools.product(vals, repeat=3)), dtype=F64)
    for c in range(4):
        check(lambda t: torch.var_mean(t * 1.0, -1, correction=c), x, what=f"var_mean c={c}")
        check(lambda t: torch.std_mean(t * 1.0, -1, correction=c), x, what=f"std_mean c={c}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 0), (3, 1), (0, 5), (1, 1), (2, 3, 1)])
def test_var_mean_short_rows(dtype, shape):
    x = torch.randn(*shape, dtype=F64).to(dtype)
    if x.numel():
        x.view(-1)[0] = INF
    for c in (0, 1, 2):
        check(lambda t: torch.var_mean(t * 1.0, -1, correction=c), x, what=f"{shape} c={c}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("special", ["inf", "-inf", "nan", "max"])
def test_var_mean_dims_and_layouts(dtype, special):
    if special == "max" and dtype != F64:
        pytest.skip("only float64 holds 1.7e308")
    v = {"inf": INF, "-inf": -INF, "nan": NAN, "max": 1.7e308}[special]
    torch.manual_seed(7)
    base = torch.round(torch.randn(4, 6, 10, dtype=F64) * 8) / 8  # eighths: a constant row's mean is exact
    base[0, 0, 0] = v
    base[1, 3, 5] = v
    base[2, 5, 9] = v
    if special == "max":
        base[3] = v
    x = base.to(dtype)
    for dims in (-1, (1, 2), (0, 1, 2)):
        check(lambda t: torch.var_mean(t * 1.0, dims), x, what=f"dims={dims}", unit_scale=True)
    # layouts made inside the function, and passed in
    check(lambda t: torch.var_mean(t.transpose(1, 2) * 1.0, -1), x, what="transposed inside", unit_scale=True)
    check(lambda t: torch.var_mean(t[:, ::2, 1:] * 1.0, -1), x, what="sliced inside", unit_scale=True)
    check(lambda t: torch.var_mean(t[:, :1, :].expand(4, 6, 10) * 1.0, (1, 2)), x, what="expanded inside", unit_scale=True)
    check(lambda t: torch.var_mean(t * 1.0, -1), x.transpose(1, 2), what="transposed input", unit_scale=True)
    check(lambda t: torch.var_mean(t * 1.0, (1, 2)), x.permute(0, 2, 1)[:, ::3], what="sliced input", unit_scale=True)
    check(lambda t: torch.var_mean(t * 1.0, -1), x[:, :, :1].expand(4, 6, 10), what="expanded input", unit_scale=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_var_mean_many_threads(dtype):
    """Batches of rows over 32768 elements (rows on threads) and one row of 40000 (parallel passes)."""
    torch.manual_seed(3)
    x = torch.randn(512, 128, dtype=F64)
    x[3, 0] = INF
    x[100, 64] = NAN
    x[200, 127] = -INF
    x[300] = INF
    x[301] = -INF
    x[302, 0], x[302, 1] = INF, -INF
    if dtype == F64:
        x[400] = 1.7e308
        x[401] = 1e306
        x[402, ::2], x[402, 1::2] = 1.7e308, -1.7e308
        x[403] = -1.7e308
        x[404] = 1e306
        x[404, 77] = 1.0000000000000002e306
    x = x.to(dtype)
    check(lambda t: torch.var_mean(t * 1.0, -1), x, what="rows")
    check(lambda t: torch.var_mean(t * 1.0, -1, correction=0), x.t().contiguous().t(), what="strided rows")
    for pos in (0, 20000, 39999):
        y = torch.randn(40000, dtype=F64)
        y[pos] = INF
        check(lambda t: torch.var_mean(t * 1.0), y.to(dtype), what=f"one row, inf at {pos}")
    if dtype == F64:
        check(lambda t: torch.var_mean(t * 1.0, 0), torch.full((40000,), 1.7e308, dtype=F64), what="one row of max")
        check(lambda t: torch.var_mean(t * 1.0, (0, 1)), torch.full((200, 200), 1e306, dtype=F64), what="1e306")


@pytest.mark.parametrize("dtype", [F64, torch.float32, torch.bfloat16], ids=str)
def test_normalization_consumes_rescued_mean(dtype):
    """The mean and var used again in the same region (a layer norm written out, a softmax's var):
    rows with infinities and NaN give NaN exactly where PyTorch does."""
    torch.manual_seed(5)
    x = torch.randn(64, 96, dtype=F64)
    x[1, 0] = INF
    x[2, 95] = INF
    x[3, 40] = NAN
    x[4] = -INF
    x[5, 0], x[5, 1] = INF, -INF
    x = x.to(dtype)

    def norm(t):
        v, m = torch.var_mean(t * 1.0, -1, keepdim=True, unbiased=False)
        return (t - m) * torch.rsqrt(v + 1e-5), m, v

    def softmax_var(t):
        e = torch.exp(t - t.amax(-1, keepdim=True))
        return torch.var_mean(e / e.sum(-1, keepdim=True), -1)

    want = norm(x)
    for ex in EXECUTORS:
        got = thunder_c.jit(norm, executors=ex)(x)
        assert_like_torch(got[1:], want[1:], f"mean/var {ex}")
        assert torch.equal(torch.isnan(got[0]), torch.isnan(want[0])), ex
        fin = torch.isfinite(want[0])
        tol = 1e-9 if dtype == F64 else 2e-5 if dtype == torch.float32 else 0.07
        assert torch.allclose(got[0][fin].double(), want[0][fin].double(), rtol=tol, atol=tol), ex
    check(softmax_var, x, what="softmax var")
