"""Shape, sort and scan ops against PyTorch eager, for what the OpInfo runs do not reach: the padding
modes of nn.Conv2d (F.pad on NCHW inputs with the module's own padding tuple), Swin's cyclic shift
(torch.roll with shift and dim tuples, and back), the tie order of sort/topk/kthvalue/cummax on inputs
full of ties (every path of ATen's CPU kernels: insertion sort, introsort, nth_element, partial_sort),
gradients through cumprod with zeros and logcumsumexp, and the errors of unsupported cases."""
import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()


def _grads(fn, *xs):
    """fn's output and the gradients of (output * cotangent).sum() w.r.t. the floating inputs, eager
    and through thunder_c.jit."""
    res = []
    for f in (fn, thunder_c.jit(fn)):
        torch.manual_seed(3)
        ins = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in xs]
        out = f(*ins)
        cot = torch.randn_like(out)
        (out * cot).sum().backward()
        res.append((out.detach(), [x.grad for x in ins if x.is_floating_point()]))
    return res


def _assert_same(eager, jitted):
    (we, wg), (je, jg) = eager, jitted
    torch.testing.assert_close(je, we)
    for a, b in zip(jg, wg):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("mode", ["reflect", "circular", "replicate", "zeros"])
@pytest.mark.parametrize("padding", [1, (2, 1), (0, 3)])
def test_conv2d_padding_modes_via_pad(mode, padding):
    conv = torch.nn.Conv2d(3, 4, 3, padding=padding, padding_mode=mode)
    pad = conv._reversed_padding_repeated_twice
    fmode = "constant" if mode == "zeros" else mode
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64)
    eager, jitted = _grads(lambda t: F.pad(t, pad, mode=fmode), x)
    _assert_same(eager, jitted)


@pytest.mark.parametrize("mode", ["reflect", "circular", "replicate", "constant"])
def test_pad_negative_and_mixed(mode):
    x = torch.randn(2, 3, 6, 7, dtype=torch.float64)
    pad = (-1, 2, 3, -2)
    eager, jitted = _grads(lambda t: F.pad(t, pad, mode=mode), x)
    _assert_same(eager, jitted)


def test_pad_errors_match_pytorch():
    x = torch.randn(1, 3, 4)
    with pytest.raises(RuntimeError, match="Padding size should be less than the corresponding input dimension"):
        thunder_c.jit(lambda t: F.pad(t, (4, 0), mode="reflect"))(x)
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        thunder_c.jit(lambda t: F.pad(t, (5, 0), mode="circular"))(x)
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode"):
        thunder_c.jit(lambda t: F.pad(t, (1, 1), mode="foo"))(x)


def test_swin_cyclic_shift_roundtrip():
    x = torch.randn(2, 8, 8, 6, dtype=torch.float64)  # B, H, W, C

    def shift(t):
        s = torch.roll(t, shifts=(-3, -3), dims=(1, 2))
        s = s * 2.0
        return torch.roll(s, shifts=(3, 3), dims=(1, 2))

    eager, jitted = _grads(shift, x)
    _assert_same(eager, jitted)
    torch.testing.assert_close(jitted[0], 2.0 * x)
    eager, jitted = _grads(lambda t: torch.roll(t, shifts=(5, -11), dims=(2, 1)), x)
    _assert_same(eager, jitted)


def _tied(n, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 4, (3, n), generator=g).to(dtype)


@pytest.mark.parametrize("n", [5, 16, 17, 100, 1000])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("stable", [False, True])
def test_sort_tie_order(n, descending, stable):
    x = _tied(n)
    f = lambda t: torch.sort(t, dim=1, descending=descending, stable=stable)  # noqa: E731
    want, got = f(x), thunder_c.jit(f)(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("n,k", [(7, 3), (40, 5), (640, 5), (1000, 3), (200, 199), (50, 50)])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("sorted_", [True, False])
def test_topk_tie_order(n, k, largest, sorted_):
    for dtype in (torch.float32, torch.int64):
        x = _tied(n, dtype, seed=n + k)
        f = lambda t: torch.topk(t, k, dim=-1, largest=largest, sorted=sorted_)  # noqa: E731
        want, got = f(x), thunder_c.jit(f)(x)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (dtype, got, want)


def test_topk_nan_first():
    x = torch.tensor([[1.0, float("nan"), 0.0, 3.0, float("nan")]])
    f = lambda t: torch.topk(t, 3)  # noqa: E731
    want, got = f(x), thunder_c.jit(f)(x)
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("n", [2, 9, 33, 500])
def test_kthvalue_and_cummax_ties(n):
    x = _tied(n, seed=n)
    for f in (lambda t: torch.kthvalue(t, (n + 1) // 2, dim=1), lambda t: torch.kthvalue(t, 1, 0, keepdim=True),
              lambda t: torch.cummax(t, 1), lambda t: torch.cummin(t, 1)):
        want, got = f(x), thunder_c.jit(f)(x)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("row", [[2.0, 3.0, 0.5, 4.0], [2.0, 0.0, 3.0, 4.0], [0.0, 2.0, 0.0, 3.0],
                                 [1.5, 2.0, 3.0, 0.0]])
def test_cumprod_gradient_with_zeros(row):
    x = torch.tensor([row, row[::-1]], dtype=torch.float64)
    eager, jitted = _grads(lambda t: torch.cumprod(t, 1), x)
    _assert_same(eager, jitted)


def test_scan_gradients():
    x = torch.randn(3, 7, dtype=torch.float64)
    for f in (lambda t: torch.logcumsumexp(t, 1), lambda t: torch.cumsum(t, 0), lambda t: torch.cummax(t, 1)[0],
              lambda t: torch.sort(t, 1, descending=True)[0], lambda t: torch.topk(t, 3)[0] * 1.0,
              lambda t: torch.kthvalue(t, 2, 0)[0]):
        eager, jitted = _grads(f, x)
        _assert_same(eager, jitted)


def test_layout_gradients():
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    for f in (lambda t: t.unfold(2, 2, 1), lambda t: torch.diag_embed(t, 1), lambda t: torch.diagonal(t, -1, 1, 2),
              lambda t: t.repeat(2, 1, 3), lambda t: torch.repeat_interleave(t, 2, dim=1),
              lambda t: torch.rot90(t, 1, (1, 2)), lambda t: torch.block_diag(t[0], t[1, 0]),
              lambda t: torch.stack(torch.meshgrid(t[0, 0], t[1, :, 0], indexing="xy")),
              lambda t: torch.diff(t, 2, -1), lambda t: torch.trapezoid(t, dx=0.5),
              lambda t: torch.cumulative_trapezoid(t, t[0, 0])):
        eager, jitted = _grads(f, x)
        _assert_same(eager, jitted)


def test_repeat_interleave_tensor_repeats():
    x = torch.randn(4, 3)
    r = torch.tensor([1, 0, 3, 2])
    f = lambda t, rr: torch.repeat_interleave(t, rr, dim=0, output_size=6)  # noqa: E731
    torch.testing.assert_close(thunder_c.jit(f)(x, r), f(x, r))
    g = lambda rr: torch.repeat_interleave(rr, output_size=6)  # noqa: E731
    torch.testing.assert_close(thunder_c.jit(g)(r), g(r))
    with pytest.raises(NotImplementedError, match="torch.repeat_interleave"):
        thunder_c.jit(lambda t, rr: torch.repeat_interleave(t, rr, dim=0))(x, r)


def test_data_dependent_split_unsupported():
    x = torch.randn(6)
    with pytest.raises(NotImplementedError, match="tensor_split"):
        thunder_c.jit(lambda t, i: torch.tensor_split(t, i))(x, torch.tensor([1, 3]))


def test_variadic_tensor_lists():
    a, b, c = torch.randn(3), torch.randn(2), torch.randn(4)
    for f in (lambda *t: torch.meshgrid(*t, indexing="ij"), lambda *t: torch.block_diag(*t),
              lambda *t: torch.cartesian_prod(*t), lambda *t: torch.atleast_2d(*t),
              lambda *t: torch.broadcast_tensors(t[0], t[0][:, None])):
        want, got = f(a, b, c), thunder_c.jit(f)(a, b, c)
        if isinstance(want, torch.Tensor):
            want, got = [want], [got]
        assert len(want) == len(got)
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w)
    torch.testing.assert_close(thunder_c.jit(torch.atleast_1d)(torch.tensor(2.0)), torch.tensor([2.0]))


def test_conjugate_transposes_of_real_tensors():
    x, y = torch.randn(3, 4), torch.randn(2, 3, 4)
    assert torch.equal(thunder_c.jit(lambda t: t.H)(x), x.H)
    assert torch.equal(thunder_c.jit(lambda t: t.mH)(y), y.mH)
    assert torch.equal(thunder_c.jit(torch.adjoint)(y), torch.adjoint(y))
    with pytest.raises(RuntimeError, match="only supported on matrices"):
        thunder_c.jit(lambda t: t.H)(y)
